"""When each schedule fires, and what its policies make of due times it cannot fire. Pure.

Theory of operation. Every schedule not paused has one due time armed in a ``DueHeap``:
the first after ``consumed_ms``, the instant up to which its due times are settled (fired
or skipped). ``tick(now_ms, active)`` pops what is due and answers with ``Fire`` and
``Skip`` outcomes, in due order per schedule, then arms the next due time:

- catch-up: a due time older than ``grace_ms`` when it is reached was missed (no server
  could fire it: down, taking over, stalled). ``skip`` drops every missed one, ``once``
  fires only the latest, ``all`` fires the first ``CATCH_UP_MAX`` of them and drops the
  rest; due times within the grace always fire;
- overlap: a due time while the schedule's previous fire is still outstanding (the
  caller's ``active(job_id)``: its job running, or fired and not started yet; a fire just
  made counts) is dropped (``skip``: one run outstanding at most, even for due times
  within the grace, as docs/schedules-and-batches.md says), fired
  anyway (``allow``), or held until that run ends (``queue``: held due times fire one
  at a time in due order, at most ``CATCH_UP_MAX`` held, the overflow dropped).

``consumed_ms`` moves only forward, to the due time of each outcome; a held due time is
not consumed until it fires, so a restart finds it due again.

Killed at any line: held in memory only. The partition's owner (``schedowner.py``) writes
each outcome's ``consumed_ms`` before it acts on it and re-arms this from the log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from server.core.scheddues import DueHeap
from server.core.schedule import CATCH_UP_MAX, CatchUp, Overlap, Schedule, fire_job_id, next_due

DEFAULT_GRACE_MS = 60_000


@dataclass(frozen=True, slots=True)
class Fire:
    schedule_id: str
    due_ms: int
    job_id: str


@dataclass(frozen=True, slots=True)
class Skip:
    schedule_id: str
    due_ms: int
    reason: str  # "missed" or "overlap"


Outcome = Fire | Skip


@dataclass(slots=True)
class _State:
    schedule: Schedule
    consumed_ms: int
    last_job: str | None


class Firing:
    def __init__(self, *, grace_ms: int = DEFAULT_GRACE_MS, cap: int = CATCH_UP_MAX) -> None:
        self.grace_ms = grace_ms
        self.cap = cap
        self.heap = DueHeap()
        self.states: dict[str, _State] = {}
        # Due times held behind a running job (overlap queue), only for schedules with some:
        # a tick looks at these, never at every schedule.
        self.held: dict[str, deque[int]] = {}

    def __len__(self) -> int:
        return len(self.states)

    def __contains__(self, schedule_id: object) -> bool:
        return schedule_id in self.states

    def schedule(self, schedule_id: str) -> Schedule | None:
        state = self.states.get(schedule_id)
        return state.schedule if state is not None else None

    def consumed_ms(self, schedule_id: str) -> int:
        return self.states[schedule_id].consumed_ms

    def last_job(self, schedule_id: str) -> str | None:
        return self.states[schedule_id].last_job

    def schedules(self) -> Iterable[Schedule]:
        return (state.schedule for state in self.states.values())

    def next_due_ms(self, schedule_id: str) -> int | None:
        """What ``schedule_id`` waits for next (a held due time first), None if nothing."""
        state = self.states.get(schedule_id)
        if state is None or state.schedule.paused:
            return None
        held = self.held.get(schedule_id)
        if held:
            return held[0]
        return self.heap.due_of(schedule_id)

    def put(self, schedule: Schedule, consumed_ms: int, last_job: str | None = None) -> None:
        """Add or replace a schedule, its due times settled up to ``consumed_ms``."""
        sid = schedule.schedule_id
        if schedule.paused:
            self.held.pop(sid, None)
        self.states[sid] = _State(schedule, consumed_ms, last_job)
        self._arm(sid)

    def remove(self, schedule_id: str) -> None:
        self.states.pop(schedule_id, None)
        self.held.pop(schedule_id, None)
        self.heap.disarm(schedule_id)

    def clear(self) -> None:
        self.states.clear()
        self.held.clear()
        self.heap.clear()

    def next_deadline_ms(self) -> int | None:
        """The earliest armed due time (held due times wait on ``active``, polled per tick)."""
        return self.heap.next_due_ms()

    def due_now(self, now_ms: int) -> list[str]:
        """The schedules with a due time at or before ``now_ms`` (nothing is popped)."""
        return self.heap.peek_due(now_ms)

    def tick(self, now_ms: int, active: Callable[[str], bool]) -> list[Outcome]:
        out: list[Outcome] = []
        fired: set[str] = set()  # job ids fired this tick: active, though not started yet

        def running(state: _State) -> bool:
            job = state.last_job
            return job is not None and (job in fired or active(job))

        for sid, held in list(self.held.items()):
            state = self.states[sid]
            if not running(state):
                out.append(self._fire(state, held.popleft(), fired))
                if not held:
                    del self.held[sid]
        for sid, first in self.heap.pop_due(now_ms):
            state = self.states[sid]
            keep, missed = self._catch_up(state, first, now_ms)
            out += [Skip(sid, due, "missed") for due in missed]
            for due in keep:
                outcome = self._overlap(state, due, running(state), fired)
                if outcome is not None:
                    out.append(outcome)
            self._arm(sid)
        return out

    # --- policies ---------------------------------------------------------------------------

    def _catch_up(self, state: _State, first: int, now_ms: int) -> tuple[list[int], list[int]]:
        """Due times from ``first`` to ``now_ms``: those to fire and the missed ones dropped.

        Past ``cap`` missed due times the rest are not even listed: ``consumed_ms`` jumps
        to the grace horizon, so the dropped ones are settled all the same.
        """
        schedule, horizon = state.schedule, now_ms - self.grace_ms
        missed: list[int] = []
        on_time: list[int] = []
        due: int | None = first
        while due is not None and due <= now_ms and len(on_time) < self.cap:
            if due >= horizon:
                on_time.append(due)
                due = next_due(schedule, due)
            elif len(missed) < self.cap:
                missed.append(due)
                due = next_due(schedule, due)
            else:
                state.consumed_ms = max(state.consumed_ms, horizon - 1)
                due = next_due(schedule, horizon - 1)
        if not missed:
            return on_time, []
        state.consumed_ms = max(state.consumed_ms, missed[-1])
        policy = schedule.catch_up
        if policy is CatchUp.ALL:
            return missed + on_time, []
        if policy is CatchUp.ONCE:
            return missed[-1:] + on_time, missed[:-1]
        return on_time, missed

    def _overlap(self, state: _State, due: int, running: bool, fired: set[str]) -> Outcome | None:
        policy = state.schedule.overlap
        sid = state.schedule.schedule_id
        held = self.held.get(sid)
        if policy is Overlap.QUEUE and (held or running):
            if held is None:
                held = self.held[sid] = deque()
            if len(held) < self.cap:
                held.append(due)
                return None
            state.consumed_ms = max(state.consumed_ms, due)
            return Skip(state.schedule.schedule_id, due, "overlap")
        if running and policy is Overlap.SKIP:
            state.consumed_ms = max(state.consumed_ms, due)
            return Skip(state.schedule.schedule_id, due, "overlap")
        return self._fire(state, due, fired)

    def _fire(self, state: _State, due: int, fired: set[str]) -> Fire:
        sid = state.schedule.schedule_id
        fire = Fire(sid, due, fire_job_id(sid, due))
        fired.add(fire.job_id)
        state.consumed_ms = max(state.consumed_ms, due)
        state.last_job = fire.job_id
        return fire

    def _arm(self, sid: str) -> None:
        state = self.states[sid]
        due = None if state.schedule.paused else next_due(state.schedule, self._after(state))
        if due is None:
            self.heap.disarm(sid)
        else:
            self.heap.arm(sid, due)

    def _after(self, state: _State) -> int:
        held = self.held.get(state.schedule.schedule_id)
        return held[-1] if held else state.consumed_ms
