"""Chaos for rolling batches: a job over the whole fleet through a window smaller than it,
one fault at a point of its life, then the window's promises as the nodes kept them.

Theory of operation. A round starts ``chaos-step`` on every node with ``batch`` 2, 3 or
25% (always less than the fleet). Each run appends ``NODE start NS`` to the job's steps
file, sleeps ``STEP_S`` and appends ``NODE end NS`` (nanosecond wall clock), besides the
run marker every chaos command writes. The fault (``Chaos._fault``) comes at one of:

- ``first``: within ``STEP_S`` of the start, while the first window votes or runs;
- ``between``: some nodes done, some still waiting their turn;
- ``end``: nobody waiting any more, the last window in flight (or the job just ended).

While it waits, the round samples the job's summary. Then it checks, besides what every
round checks (``Chaos._check``: the job ends, each node ran at most once, no process left):

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
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pushjobs.errors import PushJobsError
from pushjobs.states import TERMINAL_JOB_STATES

if TYPE_CHECKING:
    from pushjobs.testbed.chaos import Chaos
    from pushjobs.testbed.chaosplan import Draw

POINTS = ("first", "between", "end")
TERMINAL = {state.value for state in TERMINAL_JOB_STATES}
STEP_S = 0.5
STEPS = '"$PUSHJOBS_HOME/runs/$PUSHJOBS_JOB_ID.steps"'


def commands(count: str) -> dict[str, str]:
    """The whitelist entries of this kind; ``count`` writes the run marker of every kind."""
    stamp = f'echo "$PUSHJOBS_NODE %s $(date +%%s%%N)" >> {STEPS}'
    return {"chaos-step": f"sh -c '{count}; {stamp % 'start'}; sleep {STEP_S}; {stamp % 'end'}'"}


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


def play(chaos: Chaos, draw: Draw) -> None:
    """One round; its job targets the whole fleet (``Chaos.round`` draws so)."""
    BatchRound(chaos, draw).play()


class BatchRound:
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
        chaos._fault(self.victim, self.fault, self.point)
        with contextlib.suppress(TimeoutError):  # _check says it did not end
            chaos._until(lambda: self._sample() in TERMINAL, chaos.end_within_s, "end")
        job = chaos._check(self.label, self.job_id)
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
            self.chaos._until(there, 20, self.point)

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
