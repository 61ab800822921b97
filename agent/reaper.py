"""The reaper: a job never outlives its agent, even one killed with SIGKILL.

Theory of operation. A job runs as its own process group, so that it can be ended whole;
that also means nothing kills it when the agent dies. At start-up the agent starts a tiny
watchdog process (``python -S``, a few MiB, nothing imported) in a session of its own, so
that a signal to the agent's process group does not reach it, and keeps the write end of
its stdin. The agent tells it each job's process group as the job starts (``+PGID``) and
when the job has ended (``-PGID``). The watchdog only reads: when its stdin reports
end-of-file the agent is gone, however it went, and every group still registered is
killed with SIGKILL; so is every process whose environment carries this agent's tag
(``PUSHJOBS_AGENT_TAG``, set for every job), which covers a job spawned in the instant
before its ``+PGID`` line (the chaos bench killed agents in that instant). A job forked
in the very instant the agent died is not tagged yet: until its exec is done its
environment is the agent's, and it closes its copy of the pipe just before that exec, so
the first look can miss it (the chaos bench found one such ``sleep 60`` outliving its job
by a minute). So the watchdog keeps looking for ``LOOK_FOR_S`` (more and more rarely), and
exits. An agent that stops on its own says so first (``.``): it forks nothing while
stopping, one look is enough. The watchdog ignores SIGINT, SIGTERM and SIGHUP: a
Ctrl-C meant for the agent lets the agent end its job itself first.

Killed at any line. The agent: the kernel closes its end of the pipe and the watchdog
kills the job within milliseconds. The watchdog: the agent's next write fails; it logs
that jobs are no longer protected and carries on (a restarted agent starts a new one).

The agent also tells it each job's cgroup (``cPATH``, ``uPATH`` when done: ``cgroups.py``),
killed whole when the agent goes, and it finds the rest as the executor does
(``procscan.py``, whose source it runs): the registered groups' leaders' descendants and
the tagged processes, stopped first, then killed.

What it cannot do: without a cgroup, a process that left the job's tree (its parent gone)
and cleared its environment is out of its reach; so is a job forked as the agent died
whose exec takes longer than ``LOOK_FOR_S`` (the journal has no row for it yet: the row
follows the fork). A cgroup contains those: each job's own where the agent can make one,
and the systemd unit's (``KillMode=control-group`` kills everything the unit started when
the agent stops or dies).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

from agent import procscan

log = logging.getLogger("pushjobs.agent")

TAG_VARIABLE = "PUSHJOBS_AGENT_TAG"
LOOK_FOR_S = 5.0
"""How long the watchdog keeps looking for tagged processes after the agent died: a job
forked in that instant carries the tag only once its exec is done (until then its
environment is the agent's), which a starved machine may delay by seconds."""

# The watchdog's whole program; ``python -S -c`` runs it with only built-in modules, after
# the source of ``procscan.py`` (argv[3]), which imports only os, signal and time.
WATCHDOG = r"""
import os, signal, sys, time
exec(compile(sys.argv[3], "procscan", "exec"))
tag = ("PUSHJOBS_AGENT_TAG=" + sys.argv[1]).encode()
look_for_s = float(sys.argv[2])
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
groups, cgroups, pending, clean = set(), set(), b"", False
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\n")
    for line in lines:
        sign, rest = line[:1], line[1:]
        if rest.isdigit() and sign == b"+":
            groups.add(int(rest))
        elif rest.isdigit() and sign == b"-":
            groups.discard(int(rest))
        elif rest.startswith(b"/") and sign == b"c":
            cgroups.add(rest.decode())
        elif rest.startswith(b"/") and sign == b"u":
            cgroups.discard(rest.decode())
        elif line == b".":
            clean = True
def kill_cgroup(path):
    try:
        with open(path + "/cgroup.kill", "w") as f:
            f.write("1")
        return
    except OSError:
        pass
    for top, dirs, files in os.walk(path):
        try:
            with open(top + "/cgroup.procs") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
for path in cgroups:
    kill_cgroup(path)
# The jobs' processes by ancestry from each group's leader and by the agent's tag, stopped
# first so none forks away, then killed; then the groups, whatever is left of them.
end(set(groups), [tag], grace_s=0.0)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
until, pause = time.monotonic() + (0.0 if clean else look_for_s), 0.01
while time.monotonic() < until:
    time.sleep(pause)
    pause = min(pause * 2, 0.2)
    end(set(), [tag], grace_s=0.0)
"""


class Reaper:
    def __init__(self, look_for_s: float = LOOK_FOR_S) -> None:
        self.tag = secrets.token_hex(8)  # in every job's environment (``TAG_VARIABLE``)
        scan = Path(procscan.__file__).read_text()
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", WATCHDOG, self.tag, f"{look_for_s:g}", scan],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        assert self._proc.stdin is not None
        self._fd: int | None = self._proc.stdin.fileno()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def watch(self, pgid: int) -> None:
        self._tell(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        self._tell(b"-%d\n" % pgid)

    def watch_cgroup(self, path: str) -> None:
        self._tell(b"c%s\n" % path.encode())

    def release_cgroup(self, path: str) -> None:
        self._tell(b"u%s\n" % path.encode())

    def close(self) -> None:
        """The agent stops cleanly: the watchdog sees end-of-file and exits.

        It still kills what is registered or tagged, but at once: an agent stopping on its
        own forks no job, so there is nothing to keep looking for."""
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):  # stopping: a watchdog gone now protects nothing
            if fd is not None:
                os.write(fd, b".\n")
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def _tell(self, line: bytes) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line)
        except OSError as exc:
            log.error("the job watchdog is gone (%s): a job may outlive this agent", exc)
            self._fd = None
