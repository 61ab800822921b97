"""The rolling-batch half of ``Job``: the window (``batch.py``) applied to a job's nodes. Pure.

``Job`` (``job.py``) takes this as a base, as it takes ``JobSnapshot``: the job's inputs
call ``_advance`` after every change that may free a slot or spend the failure budget, and
``tick`` hands a batch job's time to ``_batch_tick``. A node is told to run only as it
leaves ``waiting`` (the ``turn`` event), and that change is in the effects before the
``run`` that follows it, so it is durable before the command leaves: a job restored from
its snapshot never gives a node a second turn, and finds every waiting node in its table.

Killed at any line: nothing here is durable; ``Window`` is rebuilt from the node table.
"""

from __future__ import annotations

from pushjobs.states import JobState, NodeState
from server.core.batch import FAILURE_STATES, IN_FLIGHT_STATES, Window, next_start_ms, plan
from server.core.effects import Effect, Send
from server.core.nodemoves import MovesNodes
from server.core.transitions import NodeEvent


class RollingBatch(MovesNodes):
    """Reads and moves the job's nodes through ``_node``; owns nothing but the window."""

    __slots__ = ()

    run_timeout_ms: int
    state: JobState
    _window: Window | None
    _floor_ms: int

    def _state_of(self, name: str) -> NodeState:
        return self.nodes[name].state

    def _in_flight(self) -> int:
        lost = len(self._window.lost) if self._window is not None else 0
        return self._counts[NodeState.READY] + self._counts[NodeState.RUNNING] + lost

    def _hold_slot(self, name: str) -> None:
        """``name`` is being lost in flight: its command may run on (``batch.py``)."""
        record = self.nodes[name]
        window = self._window
        if window is not None and record.state in IN_FLIGHT_STATES and record.turn_ms is not None:
            window.lost[name] = record.turn_ms + self.run_timeout_ms

    def holds_slot(self, name: str) -> bool:
        return self._window is not None and name in self._window.lost

    def holds_lost_slots(self) -> bool:
        return self._window is not None and bool(self._window.lost)

    def _advance(self, now_ms: int, out: list[Effect]) -> None:
        """Give waiting nodes their turn as the window allows, or skip them all (halt)."""
        window = self._window
        if window is None or self.state is not JobState.RUNNING:
            return
        step = plan(
            window.spec,
            targets=len(self.nodes),
            in_flight=self._in_flight(),
            waiting=self._counts[NodeState.WAITING],
            failures=sum(self._counts[s] for s in FAILURE_STATES),
            last_start_ms=window.last_start_ms,
            now_ms=now_ms,
        )
        why = "not started: the failure budget is spent"
        for _ in range(len(self.nodes) if step.halt else step.start):
            name = window.next_waiting(self._state_of)
            if name is None:
                break
            if step.halt:
                self._node(name, NodeEvent.HALT, now_ms, out, reason=why)
                out.append(Send("abort", self.job_id, name))  # let its commit go
                continue
            self._node(name, NodeEvent.TURN, now_ms, out)
            self.nodes[name].turn_ms = now_ms
            window.started(name, now_ms, self.run_timeout_ms)
            out.append(Send("run", self.job_id, name))

    def _batch_tick(self, window: Window, now_ms: int, out: list[Effect]) -> None:
        """Per-node run deadlines that passed, the window's next start, held commits."""
        for name in window.expired(now_ms, self._state_of):
            self._node(name, NodeEvent.TIMEOUT, now_ms, out, reason="run timeout")
            out.append(Send("abort", self.job_id, name))
        window.lost_expired(now_ms)
        self._advance(now_ms, out)
        # A repeated commit changes nothing on the node but how long it holds the job.
        out.extend(
            Send("commit", self.job_id, n) for n in window.hold_refresh(now_ms, self._state_of)
        )

    def _batch_deadline_ms(self, window: Window) -> int | None:
        """The next start or the first run deadline, none before a takeover's floor."""
        due = next_start_ms(
            window.spec,
            targets=len(self.nodes),
            in_flight=self._in_flight(),
            waiting=self._counts[NodeState.WAITING],
            last_start_ms=window.last_start_ms,
        )
        first = window.first_deadline_ms(self._state_of)
        refresh = window.refresh_due_ms if self._counts[NodeState.WAITING] else None
        lost = min(window.lost.values(), default=None)
        deadlines = [d for d in (due, first, refresh, lost) if d is not None]
        return max(min(deadlines), self._floor_ms) if deadlines else None
