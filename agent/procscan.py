"""A job's processes found in /proc and killed, whatever process group or session they left.

Theory of operation. A job starts as its own process group, but a process can leave it
(``setsid``: a daemonising script, ``nohup … &`` under setsid, a double fork) and a group
kill no longer reaches it. Where the agent cannot put the job in a cgroup of its own
(``cgroups.py``), this is how it finds the job's processes, three ways, any one enough:

- ancestry: every descendant of the job's first process (a process that calls ``setsid``
  keeps its parent until that parent exits);
- adoption: every descendant of the ``adopter``, the agent itself, which made itself a
  child subreaper (``PR_SET_CHILD_SUBREAPER``): an orphan of the job (the middle process of
  a double fork exited) is reparented to the agent instead of to init, so it stays in
  the tree; the agent's own children that are not the job's are ``spare``;
- marks: every process whose environment (as it was at its exec) holds all of ``marks``,
  the agent's tag and the job's id (``PUSHJOBS_AGENT_TAG``, ``PUSHJOBS_JOB_ID``), which a
  process keeps wherever it is reparented, unless it clears its environment.

``end`` stops every process found (SIGSTOP: a stopped process cannot fork, so the search
converges however fast the job forks), looks again until a look finds nothing new, then
kills every one (SIGKILL reaches a stopped process) and waits a short grace for them to
go. What it could not kill is returned described (pid, command, user, why): a process it
may not signal (another user's, a setuid program), one still there after the grace, a
zombie its parent does not reap. A process that left the tree before the look and cleared
its environment escapes all three marks; only a cgroup finds it.

This module imports only the standard library (no site packages): the reaper's watchdog
(``python -S``) runs this very source to do the same when the agent is gone.

Killed at any line: the processes it stopped stay stopped until the reaper's watchdog, told
by the agent's death, kills them (they are the agent's tagged job processes, or descendants
of the job's group it was told of).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

GRACE_S = 2.0
ROUNDS = 100


def processes() -> dict[int, tuple[int, str]]:
    """Every process now: pid -> (parent pid, state letter of proc(5): ``Z`` is a zombie)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone since the listing
        fields = stat.rpartition(b")")[2].split()
        table[int(name)] = (int(fields[1]), fields[0].decode())
    return table


def descendants(table: dict[int, tuple[int, str]], roots: set[int]) -> set[int]:
    """``roots`` that exist and every process below them."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def is_marked(pid: int, marks: list[bytes]) -> bool:
    """Whether ``pid``'s environment holds every one of ``marks`` (``NAME=value``)."""
    try:
        with open("/proc/" + str(pid) + "/environ", "rb") as f:
            env = set(f.read().split(b"\0"))
    except OSError:
        return False  # gone, or another user's: not readable, so not known to be ours
    return all(mark in env for mark in marks)


def find(
    table: dict[int, tuple[int, str]],
    roots: set[int],
    marks: list[bytes],
    adopter: int | None = None,
    spare: set[int] | None = None,
) -> set[int]:
    """The job's live processes in ``table``: by ancestry, adoption and marks."""
    me = os.getpid()
    found = descendants(table, roots)
    if adopter is not None:
        adopted = {p for p, (pp, _) in table.items() if pp == adopter and p not in (spare or ())}
        found |= descendants(table, adopted)
    if marks:
        found |= {p for p in table if p not in found and is_marked(p, marks)}
    return {p for p in found if table[p][1] != "Z" and p not in (me, adopter)}


def describe(pid: int, why: str) -> str:
    """``pid 1234 (sleep, uid 1000): permission denied``."""
    try:
        with open("/proc/" + str(pid) + "/comm") as f:
            comm = f.read().strip()
        uid = os.stat("/proc/" + str(pid)).st_uid
    except OSError:
        return "pid " + str(pid) + ": " + why
    return "pid " + str(pid) + " (" + comm + ", uid " + str(uid) + "): " + why


def end(
    roots: set[int],
    marks: list[bytes],
    *,
    adopter: int | None = None,
    spare: set[int] | None = None,
    kill: Callable[[int, int], None] = os.kill,
    grace_s: float = GRACE_S,
) -> list[str]:
    """Stop, then kill, every process of the job; what could not be killed, described."""
    stopped: set[int] = set()
    refused: dict[int, str] = {}
    for _ in range(ROUNDS):
        new = find(processes(), roots, marks, adopter, spare) - stopped - set(refused)
        if not new:
            break
        for pid in new:
            try:
                kill(pid, signal.SIGSTOP)
                stopped.add(pid)
            except ProcessLookupError:
                pass
            except PermissionError:
                refused[pid] = "permission denied"
    for pid in stopped:
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # its user changed since it was stopped (a setuid exec)
            refused[pid] = "permission denied"
    left = _wait_gone(stopped - set(refused), adopter, spare or set(), grace_s)
    survivors = [describe(pid, why) for pid, why in sorted(refused.items()) if _exists(pid)]
    return survivors + [describe(pid, why) for pid, why in sorted(left.items())]


def _wait_gone(
    pids: set[int], adopter: int | None, spare: set[int], grace_s: float
) -> dict[int, str]:
    """Wait for killed ``pids`` to go; reap those the agent adopted. What stayed, and why."""
    deadline = time.monotonic() + grace_s
    pause = 0.001
    while True:
        table = processes()
        for pid in pids:
            adopted = adopter is not None and pid in table and table[pid][0] == adopter
            if adopted and pid not in spare:
                _reap(pid)  # an orphan the agent adopted: nobody else will wait for it
        table = processes()
        left = {p for p in pids if p in table and not _dead(table, p, pids, adopter)}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(pause)  # a killed process needs the scheduler to run once to go
        pause = min(pause * 2, 0.05)
    out = {}
    for pid in left:
        ppid, state = table[pid]
        out[pid] = (
            "a zombie its parent (pid " + str(ppid) + ") has not reaped"
            if state == "Z"
            else "still there " + str(grace_s) + " s after SIGKILL"
        )
    return out


def _dead(
    table: dict[int, tuple[int, str]], pid: int, killed: set[int], adopter: int | None
) -> bool:
    """A zombie that is no one's worry: its parent is the agent (which reaps it, or
    ``subprocess`` does), init, or killed too (it is reparented as its parent goes). A
    zombie of a process that lives on (one that could not be killed) stays, reported."""
    ppid, state = table[pid]
    return state == "Z" and (ppid in (adopter, 1, os.getpid()) or ppid in killed)


def children(pid: int) -> set[int]:
    """The children of ``pid`` (of each of its threads), from /proc: no scan of /proc."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found.update(int(x) for x in f.read().split())
    return found


def reap_adopted(adopter: int, spare: set[int]) -> None:
    """Reap the zombies the agent adopted (an orphan of the job that exited on its own);
    never one of ``spare``, the agent's own children that ``subprocess`` waits for."""
    for pid in children(adopter) - spare:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[0] == b"Z":
                _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _exists(pid: int) -> bool:
    return os.path.exists("/proc/" + str(pid))
