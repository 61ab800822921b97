"""Chaos: a stream of jobs on a real local fleet while processes are killed and paused.

Theory of operation. A ``Sandbox`` runs one server and N agents on 127.0.0.1. Each round
starts one job of a random kind (short, long, failing, timing out, aborted) on a random
set of nodes, and injects one fault drawn from a seeded generator at a random point of
the job's life (voting, running, finished, idle): SIGKILL and restart, or SIGSTOP for a
moment then SIGCONT, of the server or of one agent. Then it checks the invariants:

- the job ends (a terminal state) within ``end_within_s``;
- each (job, node) ran at most once (every command appends to a counter file of its own);
- a node the job reports ``succeeded`` really ran it (its counter file says so);
- no process of the job is left 10 s after it has ended (none carries its
  ``PUSHJOBS_JOB_ID``); a violation says what each one is (its node, age and parent,
  whether the agent that started it still lives, the node's row) and whether it is gone
  30 s later, then kills it;

and at the end, every node is back online and a job succeeds on all of them. A violation
names the seed, the round and what broke (replay with the same seed); ``Narrow`` draws
from part of the schedule only (a suspect case in a loop). Two kinds play in modules of
their own, with points and invariants of their own (``PLAYS``): a rolling batch
(``chaosbatch.py``) and a schedule's one fire (``chaossched.py``); what a round draws from
is ``chaosplan.py``. Used by ``tests/e2e/`` (a few rounds) and ``bench/chaos.py``
(minutes to hours).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError, PushJobsError, Unreachable
from pushjobs.states import TERMINAL_JOB_STATES
from pushjobs.testbed import chaosbatch, chaossched
from pushjobs.testbed.chaosplan import POINTS_OF, Draw, Narrow, Report
from pushjobs.testbed.sandbox import DEFAULT_WHITELIST, Sandbox

TERMINAL = {state.value for state in TERMINAL_JOB_STATES}
COUNT = 'echo x >> "$PUSHJOBS_HOME/runs/$PUSHJOBS_JOB_ID.$PUSHJOBS_NODE"'
WHITELIST = {
    **DEFAULT_WHITELIST,
    "chaos-short": f"sh -c '{COUNT}'",
    "chaos-long": f"sh -c '{COUNT}; sleep 2'",
    "chaos-fail": f"sh -c '{COUNT}; exit 3'",
    "chaos-hang": f"sh -c '{COUNT}; exec sleep 60'",
    **chaosbatch.commands(COUNT),
    **chaossched.commands(COUNT),
}
PLAYS = {"batch": chaosbatch.play, "scheduled": chaossched.play}  # kinds of their own module


class Chaos:
    def __init__(
        self,
        root: Path,
        *,
        seed: int,
        agents: int = 5,
        end_within_s: float = 60.0,
        say: Callable[[str], None] = lambda line: None,
        narrow: Narrow | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.narrow = narrow or Narrow()
        self.report = Report(seed)
        self.end_within_s = end_within_s
        self.say = say
        names = [f"node-{i}" for i in range(1, agents + 1)]
        self.sandbox = Sandbox(root, nodes=names, whitelist=WHITELIST).prepare()
        (self.sandbox.root / "runs").mkdir(exist_ok=True)
        self._client: ApiClient | None = None

    # --- the fleet ---------------------------------------------------------------------

    def __enter__(self) -> Chaos:
        try:
            self.sandbox.start_server()
            self.sandbox.start_agents()
            self._until(lambda: all(r["online"] for r in self._nodes()), 30, "fleet online")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        for proc in self.sandbox.procs.values():  # a paused process ignores SIGTERM
            with contextlib.suppress(ProcessLookupError):
                if proc.alive():
                    os.kill(proc.pid, signal.SIGCONT)
        self.sandbox.stop()
        for pid in self._job_pids(None):  # whatever a violation left behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One API call; None while the server is down or not yet leading."""
        if self._client is None:
            sb = self.sandbox
            self._client = ApiClient.from_files(
                sb.api, sb.keys_dir / "server.pub", sb.keys_dir / f"{sb.user}.key", timeout_s=3
            )
        try:
            return self._client.call(method, params or {})
        except Unreachable:
            self._client.close()
            self._client = None
            return None
        except ApiError as exc:
            if exc.code == "not_leader":
                return None
            raise

    # --- one round ---------------------------------------------------------------------

    def round(self) -> None:
        self.report.rounds += 1
        n = self.report.rounds
        narrow = self.narrow
        kind = self.rng.choice(narrow.kinds)
        point = self.rng.choice([p for p in POINTS_OF[kind] if p in narrow.points])
        fault = self.rng.choice(narrow.faults)
        victim = self.rng.choice(narrow.victims or ["server", *self.sandbox.nodes])
        targets = self.rng.sample(self.sandbox.nodes, self.rng.randint(1, len(self.sandbox.nodes)))
        targets = list(self.sandbox.nodes) if kind == "batch" else targets
        label = f"seed {self.report.seed} round {n}: {kind} on {len(targets)}, {fault} {victim}"
        self.say(label := f"{label} at {point}")
        if kind in PLAYS:
            return PLAYS[kind](self, Draw(label, targets, point, fault, victim))
        job_id = self._start(kind, targets)
        if job_id is None:
            self.report.violations.append(f"{label}: the job could not be started")
            return
        self._reach(job_id, point)
        self._fault(victim, fault, point)
        if kind == "abort":
            with contextlib.suppress(PushJobsError):
                self.call("job.abort", {"job_id": job_id})
        self._check(label, job_id)

    def _start(self, kind: str, targets: list[str]) -> str | None:
        command = {"short": "chaos-short", "long": "chaos-long", "fail": "chaos-fail"}.get(
            kind, "chaos-hang"
        )
        params: dict[str, Any] = {"command": command, "nodes": targets, "quorum": "1"}
        params["timeout_s"] = 1.0 if kind == "timeout" else 30.0
        result = self.served("job.start", params)
        return None if result is None else str(result["job"]["job_id"])

    def served(self, method: str, params: dict[str, Any], within_s: float = 30) -> Any:
        """One API call, repeated while the server restarts; None if it never answered."""
        deadline = time.monotonic() + within_s
        while (result := self.call(method, params)) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the server is restarting: poll until it leads
        return result

    def _reach(self, job_id: str, point: str) -> None:
        """Wait (bounded) until the job is at ``point`` of its life, or close to it."""
        wanted = {"vote": {"voting"}, "run": {"running"}, "finish": TERMINAL, "idle": TERMINAL}
        with contextlib.suppress(TimeoutError):
            self._until(lambda: self._state(job_id) in wanted[point], 10, point)

    def _fault(self, victim: str, fault: str, point: str) -> None:
        who = "server" if victim == "server" else "agent"
        self._tally(self.report.faults, f"{fault} {who} at {point}")
        proc = self.sandbox.procs[victim]
        if fault == "pause":
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(self.rng.uniform(0.2, 2.0))  # the pause is the fault itself
            os.kill(proc.pid, signal.SIGCONT)
            return
        before = self._incarnation(victim)
        self.sandbox.kill(victim, signal.SIGKILL)
        if victim == "server":
            if self._client is not None:
                self._client.close()
                self._client = None
            self.sandbox.start_server()
            return
        self.sandbox.start_agent(victim)
        # Restarted on a new command port: in once its old self has missed a heartbeat.
        try:
            self._until(lambda: self._incarnation(victim) not in (None, before), 30, "back")
        except TimeoutError:
            self.report.violations.append(f"seed {self.report.seed}: {victim} not back")

    # --- invariants ---------------------------------------------------------------------

    def _check(self, label: str, job_id: str) -> dict[str, Any] | None:
        """The checks of every job; its view with nodes (None if it did not end)."""
        try:
            self._until(lambda: self._state(job_id) in TERMINAL, self.end_within_s, "end")
        except TimeoutError:
            self.report.violations.append(
                f"{label}: job {job_id} not ended after {self.end_within_s:g} s"
            )
            return None
        answer = self.served("job.status", {"job_id": job_id})
        if answer is None:
            return None
        job: dict[str, Any] = answer["job"]
        self._tally(self.report.outcomes, job["state"])
        for node, row in job["nodes"].items():
            runs = self._runs(job_id, node)
            if runs > 1:
                self.report.violations.append(f"{label}: {node} ran job {job_id} {runs} times")
            if row["state"] == "succeeded" and runs != 1:
                self.report.violations.append(f"{label}: {node} reported succeeded, ran {runs}")
        try:
            self._until(lambda: not self._job_pids(job_id), 10, "no process left")
        except TimeoutError:
            pids = self._job_pids(job_id)
            why = self.leftovers(job_id, pids, job["nodes"])
            self.report.violations.append(
                f"{label}: processes {pids} of ended job {job_id} left; {why}"
            )
        return job

    def finish(self) -> None:
        """Every node back online, idle and usable: the last invariant."""
        chaossched.recheck(self)
        if stuck := sorted(self.unsettled_after(60)):
            self.report.violations.append(f"seed {self.report.seed} end: not usable {stuck}")
            return
        job_id = self._start("short", list(self.sandbox.nodes))
        ok = job_id is not None
        if job_id is not None:
            with contextlib.suppress(TimeoutError):
                self._until(lambda: self._state(job_id) in TERMINAL, 30, "last job")
            job = self.call("job.status", {"job_id": job_id})
            ok = job is not None and job["job"]["summary"] == {"succeeded": len(self.sandbox.nodes)}
        if not ok:
            self.report.violations.append(f"seed {self.report.seed} end: a job on all failed")

    # --- diagnosis ----------------------------------------------------------------------

    def leftovers(
        self, job_id: str, pids: list[int], rows: dict[str, Any], *, later_s: float = 30.0
    ) -> str:
        """What each leftover is (its node, age, parent, whether the agent that started it
        lives, the node's row), and whether it is gone ``later_s`` later; then it is killed,
        so that it does not weigh on the rounds that follow."""
        seen = [self._describe(pid, rows) for pid in pids]
        with contextlib.suppress(TimeoutError):
            self._until(lambda: not set(pids) & set(self._job_pids(job_id)), later_s, "gone")
        still = sorted(set(pids) & set(self._job_pids(job_id)))
        for pid in still:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        later = f"{still} still there {later_s:g} s later (killed)" if still else "gone later"
        return "; ".join([*seen, later])

    def _describe(self, pid: int, rows: dict[str, Any]) -> str:
        env = _environ(pid)
        node = env.get("PUSHJOBS_NODE", "?")
        stat = _stat(pid)
        if stat is None:
            return f"pid {pid} ({node}) gone"
        state, ppid, pgid, started = stat
        age = _uptime() - started / os.sysconf("SC_CLK_TCK")
        cmd = _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
        agent = self.sandbox.procs.get(node)
        owner = _watchdog_parent(env.get("PUSHJOBS_AGENT_TAG", ""))
        if owner is None:
            by = "its agent's watchdog gone"
        elif agent is not None and owner == agent.pid:
            by = f"started by the current agent (pid {owner})"
        else:
            by = f"its agent's watchdog alive, parent {owner} (the current agent is "
            by += f"{agent.pid if agent is not None else '?'})"
        row = rows.get(node, {})
        return (
            f"pid {pid} on {node}: {cmd!r} state {state}, age {age:.1f} s, parent {ppid},"
            f" group {pgid}, {by}; {node}'s row {row.get('state')} {row.get('reason')!r}"
        )

    # --- helpers ------------------------------------------------------------------------

    def _state(self, job_id: str) -> str | None:
        with contextlib.suppress(PushJobsError):
            result = self.call("job.status", {"job_id": job_id, "nodes": False})
            return None if result is None else str(result["job"]["state"])
        return None

    def _nodes(self) -> list[dict[str, Any]]:
        with contextlib.suppress(PushJobsError):
            result = self.call("node.status", {"nodes": list(self.sandbox.nodes)})
            if result is not None:
                return list(result["nodes"])
        return [{"name": n, "online": False} for n in self.sandbox.nodes]

    def unsettled_after(self, within_s: float) -> set[str]:
        """The nodes still offline or busy after waiting (bounded) for all: a paused agent
        is offline, or busy with its crashed run, for a moment after its round."""

        def unsettled() -> set[str]:
            return {r["name"] for r in self._nodes() if not r["online"] or r.get("job_id")}

        with contextlib.suppress(TimeoutError):
            self._until(lambda: not unsettled(), within_s, "settled")
        return unsettled()

    def _incarnation(self, node: str) -> str | None:
        """The incarnation of ``node``'s agent while it is online; None otherwise."""
        for row in self._nodes():
            if row["name"] == node and row["online"]:
                return str(row.get("incarnation"))
        return None

    def _runs(self, job_id: str, node: str) -> int:
        path = self.sandbox.root / "runs" / f"{job_id}.{node}"
        return path.read_text().count("x") if path.exists() else 0

    def _job_pids(self, job_id: str | None) -> list[int]:
        """Processes carrying this job's id (any job of this sandbox's if None)."""
        home = f"PUSHJOBS_HOME={self.sandbox.root}".encode()
        wanted = None if job_id is None else f"PUSHJOBS_JOB_ID={job_id}".encode()
        found = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                env = environ.read_bytes().split(b"\0")
            except OSError:
                continue
            in_a_job = any(v.startswith(b"PUSHJOBS_JOB_ID=") for v in env)
            if home in env and in_a_job and (wanted is None or wanted in env):
                found.append(int(environ.parent.name))
        return found

    def _until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() >= deadline:
                raise TimeoutError(what)
            time.sleep(0.05)  # polls real processes, bounded by timeout_s

    @staticmethod
    def _tally(counts: dict[str, int], what: str) -> None:
        counts[what] = counts.get(what, 0) + 1


def _read(pid: int | str, name: str) -> bytes:
    """``/proc/PID/NAME``; empty once the process is gone."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _environ(pid: int) -> dict[str, str]:
    items = (item.decode(errors="replace") for item in _read(pid, "environ").split(b"\0"))
    return dict(item.partition("=")[::2] for item in items if item)


def _stat(pid: int | str) -> tuple[str, int, int, int] | None:
    """State, parent, process group and start time (clock ticks after boot) of ``pid``."""
    fields = _read(pid, "stat").rpartition(b")")[2].split()
    if not fields:
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _watchdog_parent(tag: str) -> int | None:
    """The parent of the watchdog started with ``tag`` (its agent, or 1 once it died)."""
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and tag):
        if tag.encode() in _read(pid, "cmdline").split(b"\0") and (stat := _stat(pid)):
            return stat[1]
    return None
