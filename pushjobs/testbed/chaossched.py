"""Chaos for schedules: a one-shot schedule due a moment ahead, one fault around its due
time, then: it fired exactly once, and the job it started ran like any other.

Theory of operation. A round adds a schedule of ``chaos-sched-N`` (N the round: a command
no other round asks for, so the jobs of this schedule are found by their command, not by
what the server says of its fires) on the round's nodes, due ``LEAD_S`` ahead. The fault
(``Chaos._fault``) comes at one of:

- ``before``: 0.2 to 1.2 s before the due time;
- ``fire``: from 20 ms before it to 60 ms after, as the server fires (a server killed -9
  then must fire once restarted: the schedule was in the log before ``schedule.add``
  answered);
- ``started``: as soon as its job exists.

Then it checks:

- a job of the command appears within ``FIRE_WITHIN_S`` after the fault;
- once the schedule says its due time is consumed (nothing due any more), exactly one job
  of the command exists, and the schedule's history names that job and no other; and at
  the end of the run (``recheck``), still that one (no late second fire);
- what every round checks of its job (``Chaos._check``: it ends, each node ran it at most
  once, no process left), and every target succeeded but the faulted agent's and those
  still offline or busy (a paused agent's crashed run) when the round began, waited for
  30 s at most.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from pushjobs.errors import PushJobsError

if TYPE_CHECKING:
    from pushjobs.testbed.chaos import Chaos
    from pushjobs.testbed.chaosplan import Draw

POINTS = ("before", "fire", "started")
LEAD_S = 1.5
FIRE_WITHIN_S = 30.0


def commands(count: str) -> dict[str, str]:
    """The whitelist entries of this kind; ``count`` writes the run marker of every kind."""
    return {"chaos-sched-(?P<round>[0-9]+)": f"sh -c '{count}; sleep 0.5'"}


def play(chaos: Chaos, draw: Draw) -> None:
    ScheduledRound(chaos, draw).play()


def recheck(chaos: Chaos) -> None:
    """At the end of the run: no schedule fired again after its round checked it."""
    listed = chaos.served("job.list", {"limit": 100_000})
    if listed is None:
        return  # the end check says the server does not answer
    now: dict[str, list[str]] = {}
    for row in listed["jobs"]:
        now.setdefault(str(row["command"]), []).append(str(row["job_id"]))
    for command, jobs in chaos.report.fired.items():
        if (later := sorted(now.get(command, []))) != jobs:
            chaos.report.violations.append(
                f"seed {chaos.report.seed} end: {command} had jobs {jobs}, now {later}"
            )


class ScheduledRound:
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
        chaos._fault(self.victim, self.fault, self.point)
        found: list[str] = []

        def fired() -> bool:
            found[:] = self._jobs()
            return bool(found)

        try:
            chaos._until(fired, FIRE_WITHIN_S, "fired")
        except TimeoutError:
            out.append(f"{self.label}: no job {FIRE_WITHIN_S:g} s after the fault")
            return
        job_id = found[-1]
        job = chaos._check(self.label, job_id)
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
                self.chaos._until(lambda: bool(self._jobs()), LEAD_S + FIRE_WITHIN_S, "started")
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
            self.chaos._until(consumed, 30, "consumed")
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
