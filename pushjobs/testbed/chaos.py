"""Chaos: a stream of jobs on a real local fleet while processes are killed and paused.

One module past 600 lines because it is one harness: the plan a run draws from, the rounds
it plays and the invariants they check. Every round draws from the same seeded generator
(so a seed replays the whole run), injects its fault and checks its job the same way
(``Chaos.inject``, ``Chaos.check_job``); the rolling batch and the schedule add points and
invariants of their own on top. Cut apart, the rounds reached into the harness.

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

and at the end, every node is back online and a job succeeds on all of them, and, the
server stopped cleanly, the audit trail it wrote through every kill and pause verifies
(``pushjobs audit verify``: each chained record against its signed checkpoints). A violation
names the seed, the round and what broke (replay with the same seed). Used by
``tests/e2e/`` (a few rounds) and ``bench/chaos.py`` (minutes to hours).

The plan. A round draws a kind, a point of its job's life that kind has (``POINTS_OF``), a
fault and a victim (a ``Draw``), from the part of the schedule ``Narrow`` leaves: all of it
by default but for the kinds, the job kinds only, so that a seed replays as it did before
batches and schedules joined (a suspect case in a loop draws from less). What the run
found is its ``Report``.

A rolling batch (``BatchRound``): a job over the whole fleet through a window smaller than
it, one fault at a point of its life, then the window's promises as the nodes kept them. A
round starts ``chaos-step`` on every node with ``batch`` 2, 3 or 25% (always less than the
fleet). Each run appends ``NODE start NS`` to the job's steps file, sleeps ``STEP_S`` and
appends ``NODE end NS`` (nanosecond wall clock), besides the run marker every chaos command
writes. The fault (``Chaos.inject``) comes at one of:

- ``first``: within ``STEP_S`` of the start, while the first window votes or runs;
- ``between``: some nodes done, some still waiting their turn;
- ``end``: nobody waiting any more, the last window in flight (or the job just ended).

While it waits, the round samples the job's summary. Then it checks, besides what every
round checks (``Chaos.check_job``: the job ends, each node ran at most once, no process
left):

- no sample of the running job had more nodes in flight (``ready``: told to run, or
  ``running``) than the window;
- the nodes never ran more than the window at once, by their own stamps: a run without an
  end stamp ends when its agent was killed (its watchdog kills it within milliseconds;
  one forked as the agent died stamps its start a little after: it ends as it began), or
  when its agent killed it on an abort (SIGKILL, at once: the agent's log line says when),
  else it runs until the round's end;
- each node started at most once, and one that ``succeeded`` also ended;
- every node is in a terminal state, and every node but the faulted agent's succeeded (and
  but those still offline or busy when the round began, waited for 30 s at most): no
  fault of the server, nor of another node, may cost a node its run.

The arithmetic on stamps is pure (``peak_in_flight``); ``BatchRound`` does the I/O.

A schedule's one fire (``ScheduledRound``): a one-shot schedule due a moment ahead, one
fault around its due time, then: it fired exactly once, and the job it started ran like
any other. A round adds a schedule of ``chaos-sched-N`` (N the round: a command no other
round asks for, so the jobs of this schedule are found by their command, not by what the
server says of its fires) on the round's nodes, due ``LEAD_S`` ahead. The fault
(``Chaos.inject``) comes at one of:

- ``before``: 0.2 to 1.2 s before the due time;
- ``fire``: from 20 ms before it to 60 ms after, as the server fires (a server killed -9
  then must fire once restarted: the schedule was in the log before ``schedule.add``
  answered);
- ``started``: as soon as its job exists.

Then it checks:

- a job of the command appears within ``FIRE_WITHIN_S`` after the fault;
- once the schedule says its due time is consumed (nothing due any more), exactly one job
  of the command exists, and the schedule's history names that job and no other; and at
  the end of the run (``Chaos.finish``), still that one (no late second fire);
- what every round checks of its job (``Chaos.check_job``: it ends, each node ran it at
  most once, no process left), and every target succeeded but the faulted agent's and
  those still offline or busy (a paused agent's crashed run) when the round began, waited
  for 30 s at most.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError, PushJobsError, Unreachable
from pushjobs.states import TERMINAL_JOB_STATES
from pushjobs.testbed.childproc import stop_all
from pushjobs.testbed.sandbox import DEFAULT_WHITELIST, Sandbox

# --- the plan -----------------------------------------------------------------------------

JOB_KINDS = ("short", "long", "fail", "timeout", "abort")
KINDS = (*JOB_KINDS, "batch", "scheduled")  # the last two play rounds of their own
BATCH_POINTS = ("first", "between", "end")
SCHEDULE_POINTS = ("before", "fire", "started")
POINTS_OF = {
    **dict.fromkeys(JOB_KINDS, ("vote", "run", "finish", "idle")),
    **{"batch": BATCH_POINTS, "scheduled": SCHEDULE_POINTS},
}
POINTS = tuple(dict.fromkeys(point for points in POINTS_OF.values() for point in points))
FAULTS = ("kill", "pause")
# What an edge's fault must never make a node of its job: the edge's nodes move on.
EDGE_NEVER = ("crashed",)


@dataclass(frozen=True)
class Narrow:
    """The part of the schedule to draw from (all of it by default): a suspect case, run
    in a loop. ``victims`` are names (``server``, ``node-3``, ``edge-0``); empty means
    every one."""

    kinds: tuple[str, ...] = JOB_KINDS  # a kind draws from the points it has (POINTS_OF)
    points: tuple[str, ...] = POINTS
    faults: tuple[str, ...] = FAULTS
    victims: tuple[str, ...] = ()


@dataclass(frozen=True)
class Draw:
    """One round's draw: its label, the job's nodes, and the fault, where and on whom."""

    label: str
    targets: list[str]
    point: str
    fault: str
    victim: str


@dataclass
class Report:
    seed: int
    rounds: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    # The jobs each schedule's command had when its round checked it (``ScheduledRound``).
    fired: dict[str, list[str]] = field(default_factory=dict)


# --- the commands rounds run --------------------------------------------------------------

TERMINAL = {state.value for state in TERMINAL_JOB_STATES}
STEP_S = 0.5  # a batch run's sleep between its stamps
STEPS = '"$PUSHJOBS_HOME/runs/$PUSHJOBS_JOB_ID.steps"'  # a batch job's stamps
LEAD_S = 1.5  # a schedule is due this far ahead
FIRE_WITHIN_S = 30.0
COUNT = 'echo x >> "$PUSHJOBS_HOME/runs/$PUSHJOBS_JOB_ID.$PUSHJOBS_NODE"'
_STAMP = f'echo "$PUSHJOBS_NODE %s $(date +%%s%%N)" >> {STEPS}'
WHITELIST = {
    **DEFAULT_WHITELIST,
    "chaos-short": f"sh -c '{COUNT}'",
    "chaos-long": f"sh -c '{COUNT}; sleep 2'",
    "chaos-fail": f"sh -c '{COUNT}; exit 3'",
    "chaos-hang": f"sh -c '{COUNT}; exec sleep 60'",
    "chaos-step": f"sh -c '{COUNT}; {_STAMP % 'start'}; sleep {STEP_S}; {_STAMP % 'end'}'",
    "chaos-sched-(?P<round>[0-9]+)": f"sh -c '{COUNT}; sleep 0.5'",
}


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
        edges: int = 0,
    ) -> None:
        self.rng = random.Random(seed)
        self.narrow = narrow or Narrow()
        self.report = Report(seed)
        self.end_within_s = end_within_s
        self.say = say
        names = [f"node-{i}" for i in range(1, agents + 1)]
        extra = {"server": {"edges": edges}} if edges else {}
        self.sandbox = Sandbox(root, nodes=names, whitelist=WHITELIST, server_extra=extra).prepare()
        # The server's edges (``[server] edges``), victims too: ``edge-0``, ``edge-1``...
        self.edges = [f"edge-{i}" for i in range(edges)]
        (self.sandbox.root / "runs").mkdir(exist_ok=True)
        self._client: ApiClient | None = None

    # --- the fleet ------------------------------------------------------------------------

    def __enter__(self) -> Chaos:
        try:
            self.sandbox.start_server()
            self.sandbox.start_agents()
            self.until(lambda: all(r["online"] for r in self._nodes()), 30, "fleet online")
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
        for pid in self.job_pids(None):  # whatever a violation left behind
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

    # --- one round ------------------------------------------------------------------------

    def round(self) -> None:
        self.report.rounds += 1
        n = self.report.rounds
        narrow = self.narrow
        kind = self.rng.choice(narrow.kinds)
        point = self.rng.choice([p for p in POINTS_OF[kind] if p in narrow.points])
        fault = self.rng.choice(narrow.faults)
        victim = self.rng.choice(narrow.victims or ["server", *self.sandbox.nodes, *self.edges])
        targets = self.rng.sample(self.sandbox.nodes, self.rng.randint(1, len(self.sandbox.nodes)))
        targets = list(self.sandbox.nodes) if kind == "batch" else targets
        label = f"seed {self.report.seed} round {n}: {kind} on {len(targets)}, {fault} {victim}"
        self.say(label := f"{label} at {point}")
        draw = Draw(label, targets, point, fault, victim)
        if kind == "batch":
            return BatchRound(self, draw).play()
        if kind == "scheduled":
            return ScheduledRound(self, draw).play()
        job_id = self._start(kind, targets)
        if job_id is None:
            self.report.violations.append(f"{label}: the job could not be started")
            return
        self._reach(job_id, point)
        self.inject(victim, fault, point)
        if kind == "abort":
            with contextlib.suppress(PushJobsError):
                self.call("job.abort", {"job_id": job_id})
        job = self.check_job(label, job_id)
        if job is not None and victim.startswith("edge-"):
            # An edge's fault is no node's: its nodes move to another edge, held online.
            lost = [n for n, row in job["nodes"].items() if row["state"] in EDGE_NEVER]
            if lost:
                self.report.violations.append(f"{label}: {lost} {EDGE_NEVER} for an edge fault")

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
            self.until(lambda: self._state(job_id) in wanted[point], 10, point)

    def inject(self, victim: str, fault: str, point: str) -> None:
        who = "server" if victim == "server" else "edge" if victim.startswith("edge-") else "agent"
        self._tally(self.report.faults, f"{fault} {who} at {point}")
        if who == "edge":
            return self._edge_fault(int(victim.removeprefix("edge-")), fault)
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
            self.until(lambda: self._incarnation(victim) not in (None, before), 30, "back")
        except TimeoutError:
            self.report.violations.append(f"seed {self.report.seed}: {victim} not back")

    def _edge(self, index: int) -> dict[str, Any] | None:
        info = self.served("server.info", {})
        edges = [] if info is None else info.get("edges") or []
        return edges[index] if index < len(edges) else None

    def _edge_fault(self, index: int, fault: str) -> None:
        """Kill or pause one of the server's edges (its leader restarts a dead one)."""
        edge = self._edge(index)
        if edge is None or not edge["live"] or not edge["pid"]:
            return  # being replaced already: this round's fault is the last one's
        pid = int(edge["pid"])
        with contextlib.suppress(ProcessLookupError):
            if fault == "pause":
                os.kill(pid, signal.SIGSTOP)
                time.sleep(self.rng.uniform(0.2, 2.0))  # the pause is the fault itself
                os.kill(pid, signal.SIGCONT)
                return
            os.kill(pid, signal.SIGKILL)

        def replaced() -> bool:
            now = self._edge(index)
            return now is not None and now["live"] and now["pid"] != pid

        try:
            self.until(replaced, 30, "edge replaced")
        except TimeoutError:
            self.report.violations.append(f"seed {self.report.seed}: edge-{index} not replaced")

    # --- invariants -----------------------------------------------------------------------

    def check_job(self, label: str, job_id: str) -> dict[str, Any] | None:
        """The checks of every job; its view with nodes (None if it did not end)."""
        try:
            self.until(lambda: self._state(job_id) in TERMINAL, self.end_within_s, "end")
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
            self.until(lambda: not self.job_pids(job_id), 10, "no process left")
        except TimeoutError:
            pids = self.job_pids(job_id)
            why = self.leftovers(job_id, pids, job["nodes"])
            self.report.violations.append(
                f"{label}: processes {pids} of ended job {job_id} left; {why}"
            )
        return job

    def finish(self) -> None:
        """Every node back online, idle and usable: the last invariant."""
        self._recheck_schedules()
        if stuck := sorted(self.unsettled_after(60)):
            self.report.violations.append(f"seed {self.report.seed} end: not usable {stuck}")
            return
        job_id = self._start("short", list(self.sandbox.nodes))
        ok, why = job_id is not None, "not started"
        if job_id is not None:
            with contextlib.suppress(TimeoutError):
                self.until(lambda: self._state(job_id) in TERMINAL, 30, "last job")
            job = self.call("job.status", {"job_id": job_id})
            ok = job is not None and job["job"]["summary"] == {"succeeded": len(self.sandbox.nodes)}
            if job is not None:
                rows = job["job"]["nodes"].items()
                why = f"job {job_id} {job['job']['state']}: " + ", ".join(
                    f"{n} {r['state']} {r.get('reason') or ''}".strip()
                    for n, r in rows
                    if r["state"] != "succeeded"
                )
        if not ok:
            self.report.violations.append(
                f"seed {self.report.seed} end: a job on all failed ({why})"
            )
        self._verify_trail()

    def _verify_trail(self) -> None:
        """The log the run wrote verifies (``pushjobs audit verify``): what the server
        chained through every kill and pause, against the checkpoints it signed. It stops
        first (SIGTERM: a clean stop signs a last checkpoint), so all of it is sealed."""
        from pushjobs.cli.audit_commands import check_log, server_key
        from pushjobs.log.factory import LogSettings, open_log

        server = self.sandbox.procs.get("server")
        if server is not None and server.alive():
            os.kill(server.pid, signal.SIGCONT)  # a paused process ignores SIGTERM
            stop_all([server], 10.0)
        handle = open_log(LogSettings(path=self.sandbox.root / "log.db", create=False))
        try:
            found = check_log(handle, "pushjobs.", server_key(self.sandbox.keys_dir / "server.pub"))
        finally:
            handle.close()
        if not found.ok:
            problems = "; ".join(str(p) for p in found.problems[:3])
            self.report.violations.append(f"seed {self.report.seed} end: audit verify: {problems}")

    def _recheck_schedules(self) -> None:
        """At the end of the run: no schedule fired again after its round checked it."""
        listed = self.served("job.list", {"limit": 100_000})
        if listed is None:
            return  # the end check says the server does not answer
        now: dict[str, list[str]] = {}
        for row in listed["jobs"]:
            now.setdefault(str(row["command"]), []).append(str(row["job_id"]))
        for command, jobs in self.report.fired.items():
            if (later := sorted(now.get(command, []))) != jobs:
                self.report.violations.append(
                    f"seed {self.report.seed} end: {command} had jobs {jobs}, now {later}"
                )

    # --- diagnosis ------------------------------------------------------------------------

    def leftovers(
        self, job_id: str, pids: list[int], rows: dict[str, Any], *, later_s: float = 30.0
    ) -> str:
        """What each leftover is (its node, age, parent, whether the agent that started it
        lives, the node's row), and whether it is gone ``later_s`` later; then it is killed,
        so that it does not weigh on the rounds that follow."""
        seen = [self._describe(pid, rows) for pid in pids]
        with contextlib.suppress(TimeoutError):
            self.until(lambda: not set(pids) & set(self.job_pids(job_id)), later_s, "gone")
        still = sorted(set(pids) & set(self.job_pids(job_id)))
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

    # --- helpers --------------------------------------------------------------------------

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
            self.until(lambda: not unsettled(), within_s, "settled")
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

    def job_pids(self, job_id: str | None) -> list[int]:
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

    def until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() >= deadline:
                raise TimeoutError(what)
            time.sleep(0.05)  # polls real processes, bounded by timeout_s

    @staticmethod
    def _tally(counts: dict[str, int], what: str) -> None:
        counts[what] = counts.get(what, 0) + 1


# --- a rolling batch ----------------------------------------------------------------------


def window_of(spec: str, fleet: int) -> int:
    """The window ``spec`` (``3`` or ``25%``) gives on ``fleet`` nodes: down, at least 1."""
    if spec.endswith("%"):
        return max(1, fleet * int(spec[:-1]) // 100)
    return int(spec)


def peak_in_flight(
    stamps: Iterable[tuple[str, str, int]], cut_ns: dict[str, int], end_ns: int
) -> int:
    """The most runs at once from ``(node, start|end, ns)`` stamps. A run with no end
    stamp ends at its node's ``cut_ns`` (its agent killed then), or as it began if it
    began later (forked as its agent died: its start stamp came after), else at
    ``end_ns``."""
    starts: dict[str, list[int]] = {}
    ends: dict[str, list[int]] = {}
    for node, what, ns in stamps:
        (starts if what == "start" else ends).setdefault(node, []).append(ns)
    events: list[tuple[int, int]] = []
    for node, begun in starts.items():
        done = sorted(ends.get(node, []))
        for i, start in enumerate(sorted(begun)):
            end = done[i] if i < len(done) else max(cut_ns.get(node, end_ns), start)
            events += [(start, 1), (end, -1)]
    now = peak = 0
    for _, delta in sorted(events):  # an end sorts before a start at the same instant
        now += delta
        peak = max(peak, now)
    return peak


class BatchRound:
    """One round; its job targets the whole fleet (``Chaos.round`` draws so)."""

    def __init__(self, chaos: Chaos, draw: Draw) -> None:
        self.chaos, self.point, self.fault, self.victim = chaos, draw.point, draw.fault, draw.victim
        nodes = list(chaos.sandbox.nodes)
        spec = chaos.rng.choice(("2", "3", "25%"))
        if window_of(spec, len(nodes)) >= len(nodes):
            spec = str(max(1, len(nodes) - 1))
        self.spec, self.window = spec, window_of(spec, len(nodes))
        self.label = f"{draw.label}, window {spec} = {self.window}"
        self.peak_seen = 0
        self.job_id = ""
        self.excused = {draw.victim}  # and the nodes offline when the job starts

    def play(self) -> None:
        chaos = self.chaos
        self.excused = {self.victim, *chaos.unsettled_after(30)}
        params: dict[str, Any] = {"command": "chaos-step", "nodes": list(chaos.sandbox.nodes)}
        params |= {"quorum": "1", "timeout_s": 30.0, "batch": self.spec}
        started = chaos.served("job.start", params)
        if started is None:
            chaos.report.violations.append(f"{self.label}: the job could not be started")
            return
        self.job_id = str(started["job"]["job_id"])
        self._reach()
        cut: dict[str, int] = {}
        if self.fault == "kill" and self.victim != "server":
            cut[self.victim] = time.time_ns()
        chaos.inject(self.victim, self.fault, self.point)
        with contextlib.suppress(TimeoutError):  # _check says it did not end
            chaos.until(lambda: self._sample() in TERMINAL, chaos.end_within_s, "end")
        job = chaos.check_job(self.label, self.job_id)
        if job is not None:
            self._check(job, {**self.killed_on_abort(), **cut})

    def _reach(self) -> None:
        if self.point == "first":
            time.sleep(self.chaos.rng.uniform(0, STEP_S))  # the moment is the fault's own
            return

        def there() -> bool:
            view = self._view()
            if view is None:
                return False
            summary = view["summary"]
            if view["state"] in TERMINAL:
                return True
            if self.point == "between":
                return bool(summary.get("succeeded")) and bool(summary.get("waiting"))
            return view["state"] == "running" and not summary.get("waiting")

        with contextlib.suppress(TimeoutError):
            self.chaos.until(there, 20, self.point)

    def _view(self) -> dict[str, Any] | None:
        """The job's view (no nodes), sampled for the window; None while unanswered."""
        with contextlib.suppress(PushJobsError):
            result = self.chaos.call("job.status", {"job_id": self.job_id, "nodes": False})
            if result is not None:
                view: dict[str, Any] = result["job"]
                if view["state"] == "running":
                    summary = view["summary"]
                    flying = summary.get("ready", 0) + summary.get("running", 0)
                    self.peak_seen = max(self.peak_seen, flying)
                return view
        return None

    def _sample(self) -> str | None:
        view = self._view()
        return None if view is None else str(view["state"])

    def _check(self, job: dict[str, Any], cut: dict[str, int]) -> None:
        out = self.chaos.report.violations
        where = f"{self.label}: job {self.job_id}"
        if self.peak_seen > self.window:
            out.append(f"{where}: the server had {self.peak_seen} nodes in flight")
        stamps = self.stamps()
        peak = peak_in_flight(stamps, cut, time.time_ns())
        if peak > self.window:
            lost = [
                f"{n} {r['state']} {r.get('reason')!r}" for n, r in sorted(job["nodes"].items())
            ]
            lost = [row for row in lost if " succeeded " not in row]
            out.append(f"{where}: the nodes ran {peak} at once; {self._overlap(stamps)}; {lost}")
        begun = Counter(node for node, what, _ in stamps if what == "start")
        ended = Counter(node for node, what, _ in stamps if what == "end")
        for node, row in sorted(job["nodes"].items()):
            if begun[node] > 1:
                out.append(f"{where}: {node} started {begun[node]} times")
            if row["state"] == "succeeded" and ended[node] != 1:
                out.append(f"{where}: {node} succeeded, ended {ended[node]} times")
            if row["state"] != "succeeded" and node not in self.excused:
                out.append(f"{where}: {node} {row['state']} ({row.get('reason')!r})")

    def killed_on_abort(self) -> dict[str, int]:
        """When each node's agent killed this job's run on an abort (SIGKILL: no end
        stamp), from the agent's own log line."""
        out: dict[str, int] = {}
        for name in self.chaos.sandbox.nodes:
            path = self.chaos.sandbox.root / "logs" / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            for line in text.splitlines():
                if f"job {self.job_id}: aborted" in line:
                    at = datetime.fromisoformat(line.split(" ", 1)[0])
                    out[name] = round(at.timestamp() * 1e9)
        return out

    def stamps(self) -> list[tuple[str, str, int]]:
        path = self.chaos.sandbox.root / "runs" / f"{self.job_id}.steps"
        lines = path.read_text().splitlines() if path.exists() else []
        words = (line.split() for line in lines)  # a run killed mid-line leaves a stub
        return [(w[0], w[1], int(w[2])) for w in words if len(w) == 3 and w[2].isdigit()]

    def _overlap(self, stamps: list[tuple[str, str, int]]) -> str:
        """The stamps, in seconds from the first (its UTC time said), to read the overlap."""
        first = min(ns for _, _, ns in stamps)
        at = time.strftime("%H:%M:%S", time.gmtime(first / 1e9))
        return f"from {at}.{first // 1_000_000 % 1000:03d}: " + " ".join(
            f"{n} {what} {(ns - first) / 1e9:.3f}"
            for n, what, ns in sorted(stamps, key=lambda s: s[2])
        )


# --- a schedule's one fire ----------------------------------------------------------------


class ScheduledRound:
    """One round: a one-shot schedule of a command of its own, one fault around its fire."""

    def __init__(self, chaos: Chaos, draw: Draw) -> None:
        self.chaos, self.label, self.targets = chaos, draw.label, draw.targets
        self.point, self.fault, self.victim = draw.point, draw.fault, draw.victim
        self.command = f"chaos-sched-{chaos.report.rounds}"
        self.schedule_id = ""

    def play(self) -> None:
        chaos, out = self.chaos, self.chaos.report.violations
        excused = {self.victim, *chaos.unsettled_after(30)}
        params: dict[str, Any] = {"command": self.command, "nodes": self.targets, "in_s": LEAD_S}
        params |= {"quorum": "1", "timeout_s": 30.0}
        added = chaos.served("schedule.add", params)
        if added is None:
            out.append(f"{self.label}: the schedule could not be added")
            return
        self.schedule_id = str(added["schedule"]["schedule_id"])
        due_ms = int(added["schedule"]["next_due_ms"])
        self.label += f", schedule {self.schedule_id} due {due_ms}"
        self._reach(due_ms / 1000)
        chaos.inject(self.victim, self.fault, self.point)
        found: list[str] = []

        def fired() -> bool:
            found[:] = self._jobs()
            return bool(found)

        try:
            chaos.until(fired, FIRE_WITHIN_S, "fired")
        except TimeoutError:
            out.append(f"{self.label}: no job {FIRE_WITHIN_S:g} s after the fault")
            return
        job_id = found[-1]
        job = chaos.check_job(self.label, job_id)
        if job is None:
            return
        for node, row in sorted(job["nodes"].items()):
            if row["state"] != "succeeded" and node not in excused:
                out.append(
                    f"{self.label}: job {job_id}: {node} {row['state']} {row.get('reason')!r}"
                )
        self._once(due_ms)
        with contextlib.suppress(PushJobsError):  # the jobs it started stay
            chaos.served("schedule.delete", {"schedule_id": self.schedule_id})

    def _reach(self, due_s: float) -> None:
        rng = self.chaos.rng
        if self.point == "started":
            with contextlib.suppress(TimeoutError):
                self.chaos.until(lambda: bool(self._jobs()), LEAD_S + FIRE_WITHIN_S, "started")
            return
        at_s = due_s - rng.uniform(0.2, 1.2) if self.point == "before" else due_s
        # A server fires some 20 ms after the due time: the kill lands in that stretch.
        at_s += rng.uniform(-0.02, 0.06) if self.point == "fire" else 0.0
        time.sleep(max(0.0, at_s - time.time()))  # the moment is the fault's own

    def _once(self, due_ms: int) -> None:
        """Once its due time is consumed: exactly one job, the one its history names."""
        out, where = self.chaos.report.violations, f"{self.label}:"

        def consumed() -> bool:
            shown = self._call("schedule.show", {"schedule_id": self.schedule_id})
            schedule = None if shown is None else shown["schedule"]
            return schedule is not None and schedule["consumed_ms"] >= due_ms

        try:
            self.chaos.until(consumed, 30, "consumed")
        except TimeoutError:
            out.append(f"{where} its due time not consumed 30 s after its job ended")
        jobs = sorted(self._of(self.chaos.served("job.list", {"limit": 50})))
        history = self.chaos.served("schedule.history", {"schedule_id": self.schedule_id})
        fired = [] if history is None else [f["job_id"] for f in history["fires"] if f["job_id"]]
        if len(jobs) != 1:
            out.append(f"{where} {len(jobs)} jobs of {self.command}: {jobs}")
        self.chaos.report.fired[self.command] = jobs
        if history is not None and sorted(fired) != jobs:
            out.append(f"{where} its history names jobs {fired}, the server has {jobs}")

    def _jobs(self) -> list[str]:
        """The ids of the jobs of this round's command, as the server lists them now."""
        return self._of(self._call("job.list", {"limit": 50}))

    def _of(self, listed: Any) -> list[str]:
        rows = [] if listed is None else listed["jobs"]
        return [str(row["job_id"]) for row in rows if row["command"] == self.command]

    def _call(self, method: str, params: dict[str, Any]) -> Any:
        with contextlib.suppress(PushJobsError):
            return self.chaos.call(method, params)
        return None


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
