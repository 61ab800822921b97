"""Rolling batches: how many of a job's ready nodes run at once, and when the next starts. Pure.

Theory of operation. A batch job votes like any job: every target gets the commit, and
the quorum is judged on the whole job before anything runs. Then, instead of telling
every ready node to run, the job runs them through a sliding window (like ``salt -b``):

- at most ``window`` nodes are in flight (``ready``: told to run, or ``running``); the
  other ready nodes are ``waiting`` their turn, in target order, holding their commit
  (the node stays reserved for this job, as it was while the job voted);
- the first window starts at once; after that a node starts as soon as a slot frees, but
  never sooner than ``wait_ms`` after the previous start (``--batch-wait``);
- once ``failures`` (nodes ``failed``, ``timed_out`` or ``crashed``, counted over the whole
  job) reach the budget (``--max-failures``), no node starts any more: the waiting ones
  are ``skipped`` (and told to let their commit go), the running ones finish, and the job
  ends ``halted``; a budget spent when nothing waits any more skips nothing, and the job
  ends ``complete`` as any other;
- the run timeout is per node: a node's run is bounded by ``turn_ms + run_timeout_ms``
  (the agent enforces the same bound from the commit), so late batches are not killed
  by a deadline that began with the first one;
- a waiting node's commit is sent again every ``HOLD_REFRESH_MS``: a repeated commit is
  only ever re-acked, never run. A node whose agent let the hold go anyway (its commit
  timeout) says ``aborted``: it ends so, and its turn passes to the next.
- a node lost while in flight (offline: paused, cut off, its key revoked; not restarted,
  which kills its job) is ``crashed``, but its command may run on, or start late from a
  ``run`` already on its way: its slot stays taken (``lost``) until the node is heard not
  running the job, or its run deadline passes (the agent's own timeout has killed it by
  then). So the window holds even when the server cannot see the node.

Why the whole job commits first rather than each node at its turn: the quorum keeps its
meaning (nothing runs unless enough nodes accepted), and a node cannot be committed a
second time anyway (its agent's journal refuses a job id it has seen). A node is told to
run exactly once, as it leaves ``waiting``; the repeats of that ``run`` the server makes
after a restart go only to nodes ``ready`` (told already), which the agent answers
without running twice.

``plan`` is the window's arithmetic; ``Window`` keeps the bookkeeping that makes a job's
step O(started) rather than O(targets): the queue of waiting nodes and the deadlines of
the in-flight ones, both in the order turns were given. Neither is persisted: both are
rebuilt from the node table (each node's state and ``turn_ms``) when a job is restored,
so a restarted server or a new leader continues the window where it stood.

Killed at any line: nothing here is durable; the node table in the job's snapshot is.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pushjobs.quorum import Share
from pushjobs.states import NodeState

HOLD_REFRESH_MS = 20_000
"""How often a waiting node is sent its commit again. An agent lets a commit go that no run
followed within its ``commit_timeout_s`` (60 s by default) and then refuses the job id for
good (its journal has seen it), so a node waiting longer than that would be lost: an agent
that renews the hold on a repeated commit keeps it for as long as the job wants it. A
third of the default leaves two repeats to lose."""

FAILURE_STATES = frozenset({NodeState.FAILED, NodeState.TIMED_OUT, NodeState.CRASHED})
IN_FLIGHT_STATES = frozenset({NodeState.READY, NodeState.RUNNING})
# The reason a node lost to its agent's restart is crashed with: the restarted agent killed
# its command, so its slot is free (every other crash of a node with a turn holds it).
NODE_RESTARTED = "node restarted (new incarnation)"


@dataclass(frozen=True, slots=True)
class BatchSpec:
    size: Share
    wait_ms: int = 0
    max_failures: Share | None = None

    def window(self, targets: int) -> int:
        """Nodes in flight at most: N, or P% of the targets rounded down (at least 1)."""
        return self.size.of(targets, round_up=False)

    def budget(self, targets: int) -> int | None:
        """Failures that halt the job: N, or P% of the targets rounded up (at least 1)."""
        if self.max_failures is None:
            return None
        return self.max_failures.of(targets, round_up=True)

    def to_options(self) -> dict[str, Any]:
        return {
            "size": str(self.size),
            "wait_s": self.wait_ms / 1000,
            "max_failures": None if self.max_failures is None else str(self.max_failures),
        }

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> BatchSpec | None:
        """The spec a job's ``options["batch"]`` holds; None for a job that is no batch.

        ValueError/TypeError on a damaged value (the handler validated it on the way in)."""
        batch = options.get("batch")
        if batch is None:
            return None
        if not isinstance(batch, Mapping):
            raise ValueError(f"batch options must be a table, not {batch!r}")
        failures = batch.get("max_failures")
        return cls(
            size=Share.parse(batch["size"], "batch"),
            wait_ms=round(float(batch.get("wait_s") or 0) * 1000),
            max_failures=None if failures is None else Share.parse(failures, "max_failures"),
        )


@dataclass(frozen=True, slots=True)
class Plan:
    start: int  # nodes to give their turn now
    halt: bool  # the failure budget is spent: skip every waiting node


def plan(
    spec: BatchSpec,
    *,
    targets: int,
    in_flight: int,
    waiting: int,
    failures: int,
    last_start_ms: int | None,
    now_ms: int,
) -> Plan:
    """What the window does at ``now_ms``."""
    budget = spec.budget(targets)
    if budget is not None and failures >= budget:
        return Plan(0, halt=waiting > 0)
    free = min(spec.window(targets) - in_flight, waiting)
    if free <= 0:
        return Plan(0, halt=False)
    if last_start_ms is None or spec.wait_ms <= 0:
        return Plan(free, halt=False)
    return Plan(1 if now_ms >= last_start_ms + spec.wait_ms else 0, halt=False)


def next_start_ms(
    spec: BatchSpec, *, targets: int, in_flight: int, waiting: int, last_start_ms: int | None
) -> int | None:
    """When ``plan`` will next start a node with no other change (None: on a change only)."""
    if waiting <= 0 or spec.window(targets) <= in_flight:
        return None
    if last_start_ms is None:
        return 0  # a first window not started yet: due now
    return last_start_ms + max(spec.wait_ms, 0)


class Window:
    """The waiting queue and in-flight deadlines of one batch job, rebuilt from its nodes."""

    __slots__ = ("deadlines", "last_start_ms", "lost", "refresh_due_ms", "spec", "waiting")

    def __init__(self, spec: BatchSpec) -> None:
        self.spec = spec
        self.waiting: deque[str] = deque()  # target order; entries no longer waiting skipped
        self.deadlines: deque[tuple[int, str]] = deque()  # (deadline ms, node), turn order
        self.last_start_ms: int | None = None
        self.refresh_due_ms: int | None = None  # the next repeat of the waiting nodes' commits
        # Nodes lost in flight whose command may still run: node -> when its slot frees.
        self.lost: dict[str, int] = {}

    def wait(self, name: str, now_ms: int) -> None:
        """``name`` waits its turn from ``now_ms``, holding the commit it acked."""
        self.waiting.append(name)
        if self.refresh_due_ms is None:
            self.refresh_due_ms = now_ms + HOLD_REFRESH_MS

    def rebuild(
        self, nodes: Iterable[tuple[str, NodeState, int | None, str]], run_timeout_ms: int
    ) -> None:
        """From (name, state, turn_ms, reason) in target order: a restored job's window."""
        self.waiting.clear()
        turns = []
        for name, state, turn_ms, reason in nodes:
            if state is NodeState.WAITING:
                self.waiting.append(name)
            if turn_ms is not None:
                self.last_start_ms = max(self.last_start_ms or turn_ms, turn_ms)
                if state in IN_FLIGHT_STATES:
                    turns.append((turn_ms + run_timeout_ms, name))
                elif state is NodeState.CRASHED and reason != NODE_RESTARTED:
                    # Maybe still running: held until heard (at once, by a live node).
                    self.lost[name] = turn_ms + run_timeout_ms
        self.deadlines = deque(sorted(turns))
        # A new leader repeats the commits once it is past its grace: it cannot know when
        # the last leader did.
        self.refresh_due_ms = 0 if self.waiting else None

    def hold_refresh(self, now_ms: int, state_of: Callable[[str], NodeState]) -> list[str]:
        """The nodes whose commit to send again now (every ``HOLD_REFRESH_MS``)."""
        if self.refresh_due_ms is None or now_ms < self.refresh_due_ms:
            return []
        self.refresh_due_ms = now_ms + HOLD_REFRESH_MS
        return [name for name in self.waiting if state_of(name) is NodeState.WAITING]

    def next_waiting(self, state_of: Callable[[str], NodeState]) -> str | None:
        """Pop the first node still waiting (others left the queue by a crash or abort)."""
        while self.waiting:
            name = self.waiting.popleft()
            if state_of(name) is NodeState.WAITING:
                return name
        return None

    def started(self, name: str, now_ms: int, run_timeout_ms: int) -> None:
        self.deadlines.append((now_ms + run_timeout_ms, name))
        self.last_start_ms = now_ms

    def lost_expired(self, now_ms: int) -> list[str]:
        """Drop the lost nodes whose run deadline passed by ``now_ms``: their slots free."""
        gone = [name for name, until_ms in self.lost.items() if until_ms <= now_ms]
        for name in gone:
            del self.lost[name]
        return gone

    def first_deadline_ms(self, state_of: Callable[[str], NodeState]) -> int | None:
        """The earliest run deadline of a node still in flight (finished ones dropped)."""
        while self.deadlines and state_of(self.deadlines[0][1]) not in IN_FLIGHT_STATES:
            self.deadlines.popleft()
        return self.deadlines[0][0] if self.deadlines else None

    def expired(self, now_ms: int, state_of: Callable[[str], NodeState]) -> list[str]:
        """Pop the in-flight nodes whose run deadline passed by ``now_ms``."""
        out = []
        while (first := self.first_deadline_ms(state_of)) is not None and first <= now_ms:
            out.append(self.deadlines.popleft()[1])
        return out
