"""The job state machine: one job over its target nodes. Pure.

Theory of operation. A job starts ``new``. ``start`` marks the nodes that are offline
``unavailable`` (right after a takeover, those not heard yet are waited for instead:
``awaiting.py``) and asks every other node to commit: the job is ``voting``. Each node
acks (``ready``) or nacks (``nacked``). Voting ends when no node is left to vote or the
vote deadline passes (``tick``); nodes that never voted become ``unavailable``. Then if at
least ``quorum`` nodes are ready, the ready nodes are told to run and the job is
``running``; otherwise the job is ``quorum_failed``, its ready nodes become
``was_ready`` and are told to abort. A running node ends ``succeeded``, ``failed``,
``aborted`` (it said so), ``crashed`` (it went offline or restarted) or ``timed_out``. The
job ends ``complete`` when every node is terminal, ``timed_out`` at the run deadline
(unfinished nodes ``timed_out`` and told to abort), or ``aborted`` on request (unfinished
nodes ``aborted`` and told to abort). ``complete`` says the job ended, not that it
succeeded: the summary counts nodes per state.

A batch job (``options["batch"]``) runs its ready nodes through a sliding window instead:
the rest are ``waiting`` their turn, the run timeout is per node, and a spent failure
budget skips the waiting nodes and ends the job ``halted`` (theory in ``batch.py``, whose
``Window`` the job owns: the waiting queue and the in-flight deadlines). Every input that
may free a slot or spend the failure budget calls ``_advance``, and ``tick`` hands a batch
job's time to ``_batch_tick``. A node is told to run only as it leaves ``waiting`` (the
``turn`` event), a change that is in the effects before the ``run`` that follows it, so it
is durable before the command leaves: a restored job never runs a node twice, nor forgets
one that waits.

A job that may wait for busy nodes (``busy_wait_ms``, ``job start --busy-wait``) and finds
one of its targets held by another job is *gated* from ``start``: ``voting``, but no node
is asked to commit; its busy nodes' rows say what they wait for (``note_busy``). The
coordinator, which knows who holds what (``busywait.py``), calls ``open`` once they are
free or at ``gate_until_ms``: the nodes still busy then vote no, saying so, the others
are asked and have the whole vote timeout. A gated job's node lost meanwhile was never
asked: ``unavailable``, not ``crashed``.

A job the server's policy holds (``policy.py``) goes from ``new`` to ``awaiting_approval``
instead (``hold``), its rule and expiry in ``approval``, and no node is asked anything:
its nodes stay ``new`` and it holds none of them. ``approve`` (naming who) begins its
vote as ``start`` would have; ``reject`` (who, why) or ``tick`` past the expiry end it
``rejected``, every node ``skipped`` with why. The decision stays in ``approval``
(``decision``, ``decided_by``, ``decided_ms``, ``reason``): it is in the job's snapshot
and in the ``job_state`` event of the move (``records.py``), the audit of who let what run.

A job started with ``offline_wait_ms`` (``job start --offline-wait``) keeps itself open
for the targets offline at start until ``offline_until_ms``: they are ``offline`` instead
of ``unavailable``, the quorum is judged over the others, and each that comes online in
time is asked then (``admit``), votes alone if the job runs already, and runs once
(``Late``, theory in ``offlinewait.py``). The job does not end while one waits; at the
deadline the rest are ``unavailable``.

Both levels are transition tables. An event that the table does not allow raises
``StateError`` and changes nothing: the caller decides whether that is a late reply to
drop (a result after a timeout) or a bug. ``_node`` is the one place a node changes state,
and ``_job`` the one place the job does. Every change is returned as an ``Effect``:
``NodeChanged`` / ``JobChanged`` to persist, ``Send`` for commands to deliver, in that
order, so the daemon can write the log before it sends.

The persisted form is the header (``header``: the job's own fields, next to ``restore``,
which reads them back) and the node table in chunks (``chunk_bytes``; rows and chunks in
``snapshot.py``). ``options`` hold a job's ``secret_env`` sealed (``sealing.py``): the
header, the log's copy, keeps them sealed so a successor can still send the commit; the
snapshot shown to API callers (``snapshot``) names each secret with a marker instead.

Time is wall milliseconds (``now_ms``), because deadlines are persisted in snapshots and
must survive a server restart.

Why one module past 600 lines: it is one state machine. The vote, the run, the rolling
batch, a takeover's unheard targets and the offline wait move the same nodes through the
same table, and one input touches several of them (a lost node is ``unavailable`` if it
was unheard, waits on if it was never asked under ``--offline-wait``, keeps its batch
slot if it was in flight, may give the next node its turn and end the job). What each
keeps of its own lives in an object the job owns and calls (``batch.Window``: the
waiting queue and the in-flight deadlines; ``awaiting.Unheard``: who is waited for,
until when; ``offlinewait.Late``: the late voters' deadlines), and the rows' encoding in
``snapshot.py``; the moves stay here, since cut along any other line the parts would
have to read each other's fields.

Killed at any line: nothing here is durable. The daemon persists a job's effects before
it sends, and a restored job (``restore``) rebuilds from its snapshot the node counts and
the batch window (from each node's state and ``turn_ms``); the row cache starts empty, and
the unheard targets are waited for by the next leader's own grace (``awaiting.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pushjobs.errors import StateError
from pushjobs.quorum import Quorum
from pushjobs.states import TERMINAL_JOB_STATES, TERMINAL_NODE_STATES, JobState, NodeState
from server.core.awaiting import UNHEARD, Unheard
from server.core.batch import (
    FAILURE_STATES,
    IN_FLIGHT_STATES,
    BatchSpec,
    Window,
    next_start_ms,
    plan,
)
from server.core.busywait import Blocked, gave_up
from server.core.effects import Check, Effect, JobChanged, NodeChanged, Send
from server.core.healthgate import ANSWER_GRACE_MS, Gate, HaltSpec
from server.core.offlinewait import GAVE_UP, NO_QUORUM, WAITING, Late, run_deadline_ms
from server.core.policy import Hold
from server.core.sealing import redacted
from server.core.snapshot import (
    CHUNK_NODES,
    LEGACY_CHUNK_NODES,
    NodeRecord,
    chunk_bytes,
    chunk_json,
    node_from_json,
    node_json,
)
from server.core.transitions import JOB_TRANSITIONS, NODE_TRANSITIONS, JobEvent, NodeEvent

__all__ = ["Job", "NodeRecord"]

MAX_REASON_CHARS = 500
MAX_LEFT_RUNNING = 10  # processes of a node's row the agent could not kill, at most


@dataclass(slots=True)
class Job:
    job_id: str
    command: str
    nodes: dict[str, NodeRecord]
    quorum: Quorum = field(default_factory=Quorum)
    vote_timeout_ms: int = 30_000
    run_timeout_ms: int = 3_600_000
    options: dict[str, Any] = field(default_factory=dict)
    requested_by: str = ""
    state: JobState = JobState.NEW
    created_ms: int = 0
    started_ms: int | None = None
    vote_deadline_ms: int | None = None
    run_started_ms: int | None = None
    run_deadline_ms: int | None = None
    finished_ms: int | None = None
    # ``job start --busy-wait``: how long the job may wait for busy targets before its
    # vote (0: it does not wait), and while it waits, until when (``busywait.py``).
    busy_wait_ms: int = 0
    gate_until_ms: int | None = None
    # Held by the server's policy (``hold``): {rule, expires_ms, requester}, and once decided
    # {decision: approved|rejected|expired, decided_by, decided_ms, reason}. None: never held.
    approval: dict[str, Any] | None = None
    # ``job start --offline-wait`` (``offlinewait.py``): how long targets offline at start
    # are waited for (0: they are unavailable at once), and until when (set as the vote
    # begins; persisted, so a new leader waits until the same instant).
    offline_wait_ms: int = 0
    offline_until_ms: int | None = None
    # A batch job that stopped starting nodes: why (its failure budget spent, or its
    # health signal fired: ``healthgate.py``). None: it never halted.
    halt_reason: str | None = None
    chunk_nodes: int = CHUNK_NODES  # a restored job keeps the layout its records have
    # Nodes per state, kept by ``_node``: a vote or a result must not cost O(targets), or
    # a 50,000-node job costs O(n^2) to finish.
    _counts: Counter[NodeState] = field(
        default_factory=Counter, init=False, repr=False, compare=False
    )
    _positions: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _order: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    # Each node's serialized chunk entry, dropped by ``_node`` when the node changes: a
    # chunk is rewritten whenever any of its nodes changes, and replies to a big job
    # land all over it, so rows are encoded once per change, not once per rewrite.
    _rows: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)
    _window: Window | None = field(default=None, init=False, repr=False, compare=False)
    _floor_ms: int = field(default=0, init=False, repr=False, compare=False)  # see ``rearm``
    # Started right after a takeover: the targets not heard yet (``awaiting.py``).
    _unheard: Unheard = field(default_factory=Unheard, init=False, repr=False, compare=False)
    # Nodes asked to commit after the job began to run (``offlinewait.py``).
    _late: Late = field(default_factory=Late, init=False, repr=False, compare=False)
    # A batch job's health signal (``--halt-if``): its checks (``healthgate.py``).
    _gate: Gate | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._counts.update(record.state for record in self.nodes.values())
        if self.state is JobState.RUNNING and self.offline_until_ms is not None:
            asked = ((name, r.state, r.changed_ms) for name, r in self.nodes.items())
            self._late.rebuild(asked, self.vote_timeout_ms)
        spec = BatchSpec.from_options(self.options)
        if spec is not None:
            self._window = Window(spec)
            rows = ((name, r.state, r.turn_ms, r.reason) for name, r in self.nodes.items())
            self._window.rebuild(rows, self.run_timeout_ms)
            halt = HaltSpec.from_options(self.options)
            if halt is not None:
                self._gate = Gate(halt)

    @classmethod
    def new(
        cls,
        job_id: str,
        command: str,
        nodes: Iterable[str],
        now_ms: int,
        *,
        quorum: Quorum | None = None,
        vote_timeout_ms: int = 30_000,
        run_timeout_ms: int = 3_600_000,
        options: dict[str, Any] | None = None,
        requested_by: str = "",
        busy_wait_ms: int = 0,
        offline_wait_ms: int = 0,
    ) -> Job:
        names = list(dict.fromkeys(nodes))
        if not names:
            raise StateError("a job needs at least one node")
        return cls(
            job_id=job_id,
            command=command,
            nodes={name: NodeRecord(changed_ms=now_ms) for name in names},
            quorum=quorum or Quorum(),
            vote_timeout_ms=vote_timeout_ms,
            run_timeout_ms=run_timeout_ms,
            options=options or {},
            requested_by=requested_by,
            created_ms=now_ms,
            busy_wait_ms=busy_wait_ms,
            offline_wait_ms=offline_wait_ms,
        )

    def note_left_running(self, node: str, left: tuple[str, ...]) -> bool:
        """Record the processes of the job ``node``'s agent could not kill, in whatever
        state the node is (its row says so; its state stays); whether anything changed."""
        record = self.nodes.get(node)
        if record is None:
            return False
        # Bounded like a reason: a snapshot chunk stays under the log's value limit.
        kept = tuple(p[:MAX_REASON_CHARS] for p in left[:MAX_LEFT_RUNNING])
        if record.left_running == kept:
            return False
        record.left_running = kept
        self._rows.pop(node, None)
        return True

    # --- the two tables -----------------------------------------------------------------

    def _job(self, event: JobEvent, now_ms: int, out: list[Effect]) -> None:
        new = JOB_TRANSITIONS.get((self.state, event))
        if new is None:
            raise StateError(f"job {self.job_id}: cannot {event} while {self.state}")
        out.append(JobChanged(self.job_id, self.state, new, now_ms))
        self.state = new
        if new in TERMINAL_JOB_STATES:
            self.finished_ms = now_ms
            self._rows.clear()  # written at most once more: a kept finished job holds no cache

    def _node(
        self,
        node: str,
        event: NodeEvent,
        now_ms: int,
        out: list[Effect],
        *,
        exit_status: int | None = None,
        reason: str = "",
    ) -> None:
        """Move ``node`` by ``event``: its record, the counts, its cached row, the effect.
        The hot path (a 50,000-node job calls it for every node at every step): no more
        lookups or allocations than these."""
        record = self.nodes.get(node)
        if record is None:
            raise StateError(f"job {self.job_id}: {node} is not a target")
        new = NODE_TRANSITIONS.get((record.state, event))
        if new is None:
            raise StateError(f"job {self.job_id}: {node} cannot {event} while {record.state}")
        out.append(NodeChanged(self.job_id, node, record.state, new, now_ms, exit_status, reason))
        self._rows.pop(node, None)
        self._counts[record.state] -= 1
        self._counts[new] += 1
        record.state = new
        record.changed_ms = now_ms
        if exit_status is not None:
            record.exit_status = exit_status
        if reason:
            # Reasons are for people; a bound keeps every snapshot chunk under the log's
            # value limit whatever a node or a command line says.
            record.reason = reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS]
        if event in (NodeEvent.ACK_COMMIT, NodeEvent.NACK_COMMIT):
            record.voted_ms = now_ms
        if new in TERMINAL_NODE_STATES:
            record.finished_ms = now_ms

    # --- inputs -------------------------------------------------------------------------

    def start(
        self,
        online: Iterable[str],
        now_ms: int,
        *,
        unheard: Iterable[str] = (),
        unheard_until_ms: int | None = None,
        busy: Mapping[str, Blocked] | None = None,
    ) -> list[Effect]:
        """Begin voting: offline targets are unavailable, the others get a commit; the
        ``unheard`` ones (after a takeover) are waited for until ``unheard_until_ms``.

        A job that may wait for busy nodes (``busy_wait_ms``) and finds some of its online
        targets ``busy`` (``busywait.Claims``) sends no commit yet: it is ``gated``, its
        nodes stay ``new`` (the busy ones say what they wait for) until ``open``."""
        if self.state is not JobState.NEW:
            raise StateError(f"job {self.job_id}: cannot start while {self.state}")
        return self._begin(
            JobEvent.START,
            online,
            now_ms,
            unheard=unheard,
            unheard_until_ms=unheard_until_ms,
            busy=busy,
        )

    def _begin(
        self,
        event: JobEvent,
        online: Iterable[str],
        now_ms: int,
        *,
        unheard: Iterable[str],
        unheard_until_ms: int | None,
        busy: Mapping[str, Blocked] | None,
    ) -> list[Effect]:
        """The vote begins (``start``, or ``approve``)."""
        alive = set(online)
        out: list[Effect] = []
        self._job(event, now_ms, out)
        self.started_ms = now_ms
        waited = {name for name in unheard if name not in alive and name in self.nodes}
        vote_deadline_ms = now_ms + self.vote_timeout_ms
        vote_deadline_ms = self._unheard.wait(waited, unheard_until_ms, vote_deadline_ms)
        self.vote_deadline_ms = vote_deadline_ms
        awaits = self._unheard.awaits
        if self.offline_wait_ms > 0:
            self.offline_until_ms = now_ms + self.offline_wait_ms
        for name in self.nodes:
            if name not in alive and not awaits(name):
                if self.offline_until_ms is not None:
                    self._node(name, NodeEvent.DEFER, now_ms, out, reason=WAITING)
                else:
                    self._node(name, NodeEvent.OFFLINE_AT_START, now_ms, out, reason="offline")
        blocked = {n: b for n, b in (busy or {}).items() if self._votes_now(n)}
        if self.busy_wait_ms > 0 and blocked:
            # Gated: the vote starts at ``open``; its deadline, until then, is the latest
            # it can be (persisted: a restored job is bounded the same).
            self.gate_until_ms = now_ms + self.busy_wait_ms
            self.vote_deadline_ms = max(vote_deadline_ms, self.gate_until_ms + self.vote_timeout_ms)
            self.note_busy(blocked)
            return out
        self._send_commits(out)
        self._maybe_end_voting(now_ms, out, deadline_passed=False)
        return out

    # --- held for approval (``policy.py``) ----------------------------------------------

    def hold(self, hold: Hold, now_ms: int) -> list[Effect]:
        """Wait for an admin's approval until ``hold.expires_ms``, asking no node anything."""
        out: list[Effect] = []
        self._job(JobEvent.HOLD, now_ms, out)
        self.approval = {**hold.to_json(), "rule": hold.rule[:MAX_REASON_CHARS]}
        return out

    @property
    def requester(self) -> str:
        """Whose job it is, for who may approve it (``policy.refusal``)."""
        return str((self.approval or {}).get("requester") or self.requested_by)

    @property
    def awaiting_approval(self) -> bool:
        return self.state is JobState.AWAITING_APPROVAL

    def approve(
        self,
        by: str,
        online: Iterable[str],
        now_ms: int,
        *,
        reason: str = "",
        unheard: Iterable[str] = (),
        unheard_until_ms: int | None = None,
        busy: Mapping[str, Blocked] | None = None,
    ) -> list[Effect]:
        """``by`` approved the job: its vote begins, as ``start``'s would have."""
        if not self.awaiting_approval:
            raise StateError(f"job {self.job_id}: cannot approve while {self.state}")
        self._decide("approved", by, reason, now_ms)
        return self._begin(
            JobEvent.APPROVE,
            online,
            now_ms,
            unheard=unheard,
            unheard_until_ms=unheard_until_ms,
            busy=busy,
        )

    def reject(self, by: str, reason: str, now_ms: int) -> list[Effect]:
        """``by`` rejected the job: it ends ``rejected``, no node asked."""
        if not self.awaiting_approval:
            raise StateError(f"job {self.job_id}: cannot reject while {self.state}")
        self._decide("rejected", by, reason, now_ms)
        why = f"rejected by {by}: {reason}" if reason else f"rejected by {by}"
        return self._not_approved(JobEvent.REJECT, why, now_ms)

    def _decide(self, decision: str, by: str, reason: str, now_ms: int) -> None:
        self.approval = {
            **(self.approval or {}),
            "decision": decision,
            "decided_by": by,
            "decided_ms": now_ms,
            "reason": reason[:MAX_REASON_CHARS],
        }

    def _not_approved(self, event: JobEvent, why: str, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        self._job(event, now_ms, out)
        for name in self.nodes:
            self._node(name, NodeEvent.NOT_APPROVED, now_ms, out, reason=why)
        return out

    # --- waiting for busy nodes (``busywait.py``) ---------------------------------------

    @property
    def gated(self) -> bool:
        """Voting has not begun: the job waits for busy targets."""
        return self.gate_until_ms is not None and self.state is JobState.VOTING

    def _votes_now(self, name: str) -> bool:
        record = self.nodes.get(name)
        return (
            record is not None and record.state is NodeState.NEW and not self._unheard.awaits(name)
        )

    def gate_nodes(self) -> list[str]:
        """The targets a gated job waits to ask (``new``, heard), in target order."""
        return [name for name in self.nodes if self._votes_now(name)]

    def note_busy(self, blocked: Mapping[str, Blocked]) -> list[str]:
        """A gated job's rows say what each node waits for; the nodes whose row changed
        (no change of state: the caller persists them as amended)."""
        changed = []
        for name in self.gate_nodes():
            why = blocked[name].reason() if name in blocked else ""
            record = self.nodes[name]
            if record.reason != why:
                record.reason = why
                self._rows.pop(name, None)
                changed.append(name)
        return changed

    def open(self, now_ms: int, blocked: Mapping[str, Blocked]) -> list[Effect]:
        """End a gated job's wait: the nodes in ``blocked`` (still busy at the bound) vote
        no, saying so; the others are asked to commit, and have ``vote_timeout_ms``."""
        out: list[Effect] = []
        if not self.gated:
            return out
        assert self.gate_until_ms is not None and self.started_ms is not None
        waited = now_ms - self.started_ms
        self.gate_until_ms = None
        self.vote_deadline_ms = now_ms + self.vote_timeout_ms
        for name in self.gate_nodes():
            self.nodes[name].reason = ""
            self._rows.pop(name, None)
            if name in blocked:
                reason = gave_up(blocked[name], waited)
                self._node(name, NodeEvent.NACK_COMMIT, now_ms, out, reason=reason)
        self._send_commits(out)
        self._maybe_end_voting(now_ms, out, deadline_passed=False)
        return out

    def _send_commits(self, out: list[Effect]) -> None:
        out.extend(Send("commit", self.job_id, name) for name in self.gate_nodes())

    def ack_commit(self, node: str, now_ms: int) -> list[Effect]:
        record = self.nodes.get(node)
        if record is not None and record.state is NodeState.WAITING:
            return []  # the answer to a held commit repeated (``batch.HOLD_REFRESH_MS``)
        return self._vote(node, NodeEvent.ACK_COMMIT, now_ms, "")

    def nack_commit(self, node: str, now_ms: int, reason: str) -> list[Effect]:
        return self._vote(node, NodeEvent.NACK_COMMIT, now_ms, reason)

    def _vote(self, node: str, event: NodeEvent, now_ms: int, reason: str) -> list[Effect]:
        record = self.nodes.get(node)
        if self.state is JobState.RUNNING and record is not None and node in self._late.voters:
            return self._late_vote(node, event, now_ms, reason)
        if self.state is not JobState.VOTING:
            raise StateError(f"job {self.job_id}: vote from {node} while {self.state}")
        out: list[Effect] = []
        self._node(node, event, now_ms, out, reason=reason)
        self._maybe_end_voting(now_ms, out, deadline_passed=False)
        return out

    def ack_run(self, node: str, now_ms: int) -> list[Effect]:
        self._require_running(node)
        out: list[Effect] = []
        self._node(node, NodeEvent.ACK_RUN, now_ms, out)
        return out

    def nack_run(self, node: str, now_ms: int, reason: str) -> list[Effect]:
        return self._finish_node(node, NodeEvent.NACK_RUN, now_ms, None, reason)

    def succeeded(self, node: str, now_ms: int, exit_status: int = 0) -> list[Effect]:
        return self._finish_node(node, NodeEvent.SUCCEEDED, now_ms, exit_status, "")

    def failed(self, node: str, now_ms: int, exit_status: int | None, reason: str) -> list[Effect]:
        return self._finish_node(node, NodeEvent.FAILED, now_ms, exit_status, reason)

    def aborted(self, node: str, now_ms: int, reason: str) -> list[Effect]:
        return self._finish_node(node, NodeEvent.ABORTED, now_ms, None, reason)

    def node_lost(
        self, node: str, now_ms: int, reason: str, *, restarted: bool = False
    ) -> list[Effect]:
        """The node went offline or restarted: in-flight means crashed. Gone silent (not
        restarted, which kills its job), a batch node keeps its slot (``batch.py``)."""
        record = self.nodes.get(node)
        if record is None or record.state in TERMINAL_NODE_STATES:
            return []
        if self.state not in (JobState.VOTING, JobState.RUNNING):
            return []
        if record.state is NodeState.OFFLINE:
            return []  # never asked: restarted or gone again, it just goes on waiting
        out: list[Effect] = []
        if not restarted:
            self._hold_slot(node)
        self._late.voted(node)
        # One this leader has yet to hear from was never asked to commit: not crashed.
        # One a gated job never asked either (``open`` had not come). Under
        # ``--offline-wait`` such a node waits for its return instead.
        never_asked = self._unheard.lost(node) or self.gated
        if never_asked and self._offline_waits(now_ms):
            self._node(node, NodeEvent.DEFER, now_ms, out, reason=WAITING)
            return out
        event = NodeEvent.UNHEARD if never_asked else NodeEvent.LOST
        self._node(node, event, now_ms, out, reason=reason)
        if self.state is JobState.VOTING:
            self._maybe_end_voting(now_ms, out, deadline_passed=False)
        else:
            self._advance(now_ms, out)
            self._maybe_complete(now_ms, out)
        return out

    def heard(self, node: str) -> None:
        """``node`` came online: if this job still waited to hear it, it votes from now."""
        self._unheard.heard(node)

    # --- waiting for offline nodes (``offlinewait.py``) ---------------------------------

    def _offline_waits(self, now_ms: int) -> bool:
        """Whether a node never asked may still wait for its return."""
        return self.offline_until_ms is not None and now_ms < self.offline_until_ms

    def admit(self, node: str, now_ms: int) -> list[Effect]:
        """``node`` came online: if it waited ``offline``, it is asked to commit now (the
        move is before the ``commit`` in the effects: durable before it leaves). A gated
        job asks it with the others at ``open``."""
        record = self.nodes.get(node)
        if record is None or record.state is not NodeState.OFFLINE:
            return []
        if self.state not in (JobState.VOTING, JobState.RUNNING):
            return []
        if not self._offline_waits(now_ms):
            return []  # too late: ``tick`` gives it up
        out: list[Effect] = []
        record.reason = ""  # it no longer waits: the row says nothing until it answers
        self._node(node, NodeEvent.ADMIT, now_ms, out)
        if self.gated:
            return out
        if self.state is JobState.RUNNING:
            self._late.asked(node, now_ms, self.vote_timeout_ms)
        out.append(Send("commit", self.job_id, node))
        return out

    def give_up(self, node: str, now_ms: int, reason: str) -> list[Effect]:
        """``node``, waited for ``offline``, cannot come back (its key was revoked): it is
        ``unavailable`` with ``reason`` now, and the job may end."""
        record = self.nodes.get(node)
        if record is None or record.state is not NodeState.OFFLINE:
            return []
        out: list[Effect] = []
        self._node(node, NodeEvent.GIVE_UP, now_ms, out, reason=reason)
        if self.state is JobState.VOTING:
            self._maybe_end_voting(now_ms, out, deadline_passed=False)
        else:
            self._maybe_complete(now_ms, out)
        return out

    def _late_vote(self, node: str, event: NodeEvent, now_ms: int, reason: str) -> list[Effect]:
        """A late node's vote while the job runs: it votes alone; ready, it runs at once
        (a batch job: it queues for the window)."""
        self._late.voted(node)
        out: list[Effect] = []
        self._node(node, event, now_ms, out, reason=reason)
        if event is NodeEvent.ACK_COMMIT:
            if self._window is None:
                # Its run is timed from now, not from the job's (``records.py``): the wait
                # for it is not run time.
                self.nodes[node].turn_ms = now_ms
                out.append(Send("run", self.job_id, node))
            else:
                self._node(node, NodeEvent.WAIT_TURN, now_ms, out)
                self._window.wait(node, now_ms)
                self._advance(now_ms, out)
        self._maybe_complete(now_ms, out)
        return out

    def _offline_tick(self, now_ms: int, out: list[Effect]) -> None:
        """Late voters silent past their vote deadline; at the offline-wait deadline, the
        nodes still ``offline``, in target order."""
        for name in self._late.silent(now_ms):
            if self.nodes[name].state is NodeState.NEW:
                why = "no vote before the deadline"
                self._node(name, NodeEvent.NO_VOTE, now_ms, out, reason=why)
                out.append(Send("abort", self.job_id, name))  # in case its commit arrives late
        if self.offline_until_ms is None or now_ms < self.offline_until_ms:
            return
        if self._counts[NodeState.OFFLINE]:
            self._give_up_offline(GAVE_UP, now_ms, out)

    def _give_up_offline(self, reason: str, now_ms: int, out: list[Effect]) -> None:
        for name, record in self.nodes.items():
            if record.state is NodeState.OFFLINE:
                self._node(name, NodeEvent.GIVE_UP, now_ms, out, reason=reason)

    def _offline_deadline_ms(self) -> int | None:
        until = self.offline_until_ms if self._counts[NodeState.OFFLINE] else None
        return self._late.deadline_ms(until)

    def release_slot(self, node: str, now_ms: int) -> list[Effect]:
        """``node``, lost in flight, is heard not running this job: its slot frees."""
        if self._window is None or self._window.lost.pop(node, None) is None:
            return []
        out: list[Effect] = []
        if self.state is JobState.RUNNING:
            self._advance(now_ms, out)
            self._maybe_complete(now_ms, out)
        return out

    def abort(self, now_ms: int, reason: str = "abort requested") -> list[Effect]:
        out: list[Effect] = []
        self._job(JobEvent.ABORT, now_ms, out)
        for name, record in self.nodes.items():
            if record.state not in TERMINAL_NODE_STATES:
                asked = record.state is not NodeState.OFFLINE
                self._node(name, NodeEvent.ABORT, now_ms, out, reason=reason)
                if self.started_ms is not None and asked:  # only a started job sent commits
                    out.append(Send("abort", self.job_id, name))
        return out

    def tick(self, now_ms: int) -> list[Effect]:
        """Apply the vote or run deadline if it has passed by ``now_ms``."""
        out: list[Effect] = []
        deadline = self.next_deadline_ms()
        if deadline is None or now_ms < deadline:
            return out
        if self.awaiting_approval:
            self._decide("expired", "", "approval expired", now_ms)
            return self._not_approved(JobEvent.EXPIRE, "approval expired", now_ms)
        if self.state is JobState.VOTING:
            self._offline_tick(now_ms, out)
            self._hear_no_more(now_ms, out)
            # A gated job's bound is the coordinator's to apply (``open``): it knows who
            # is busy. Its vote deadline falls after the bound.
            passed = now_ms >= (self.vote_deadline_ms or 0) and not self.gated
            self._maybe_end_voting(now_ms, out, deadline_passed=passed)
            return out
        self._offline_tick(now_ms, out)
        if self._window is not None:  # per-node run deadlines, and the next start
            self._batch_tick(self._window, now_ms, out)
            self._maybe_complete(now_ms, out)
            return out
        self._maybe_complete(now_ms, out)  # the last node waited for was given up
        if self.finished or now_ms < (self.run_deadline_ms or 0):
            return out
        self._job(JobEvent.TIMEOUT, now_ms, out)
        for name, record in self.nodes.items():
            if record.state not in TERMINAL_NODE_STATES:
                asked = record.state is not NodeState.OFFLINE
                self._node(name, NodeEvent.TIMEOUT, now_ms, out, reason="run timeout")
                if asked:
                    out.append(Send("abort", self.job_id, name))
        return out

    def crash(self, now_ms: int, reason: str) -> list[Effect]:
        """The server cannot carry the job on (e.g. its snapshot could not be restored)."""
        out: list[Effect] = []
        self._job(JobEvent.CRASH, now_ms, out)
        for name, record in self.nodes.items():
            if record.state not in TERMINAL_NODE_STATES:
                asked = record.state is not NodeState.OFFLINE
                self._node(name, NodeEvent.LOST, now_ms, out, reason=reason)
                if asked:
                    out.append(Send("abort", self.job_id, name))
        return out

    # --- derived ------------------------------------------------------------------------

    def rearm(self, earliest_ms: int) -> None:
        """Move the pending deadline to ``earliest_ms`` if it falls before (a takeover);
        never the offline-wait deadline (``offlinewait.py``), only its late voters'."""
        self._late.floor(earliest_ms)
        if self.gated and (self.gate_until_ms or 0) < earliest_ms:
            self.gate_until_ms = earliest_ms  # who is busy is known once nodes are heard
        if self.state is JobState.VOTING and (self.vote_deadline_ms or 0) < earliest_ms:
            self.vote_deadline_ms = earliest_ms
        elif self._window is not None:
            self._floor_ms = earliest_ms  # per-node deadlines: none falls before this
        elif self.state is JobState.RUNNING and (self.run_deadline_ms or 0) < earliest_ms:
            self.run_deadline_ms = earliest_ms

    def next_deadline_ms(self) -> int | None:
        if self.awaiting_approval:
            # Not moved by a takeover (``rearm``): an approval needs no node to answer.
            return int((self.approval or {}).get("expires_ms", 0))
        if self.state is JobState.VOTING:
            due = self._unheard.deadline_ms(self.vote_deadline_ms)
            if self.gated and self.gate_until_ms is not None:
                due = self.gate_until_ms if due is None else min(due, self.gate_until_ms)
            return _earliest(due, self._offline_deadline_ms())
        if self.state is not JobState.RUNNING:
            return None
        if self._window is None:
            return _earliest(self.run_deadline_ms, self._offline_deadline_ms())
        return _earliest(self._batch_deadline_ms(self._window), self._offline_deadline_ms())

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_JOB_STATES

    def count(self, state: NodeState) -> int:
        return self._counts[state]

    def all_succeeded(self) -> bool:
        return self._counts[NodeState.SUCCEEDED] == len(self.nodes)

    def summary(self) -> dict[str, int]:
        return {state.value: n for state, n in sorted(self._counts.items()) if n > 0}

    def awaits(self, node: str) -> bool:
        """Whether ``node`` is a target this job still waits to hear from."""
        return self._unheard.awaits(node)

    def holds_slot(self, name: str) -> bool:
        return self._window is not None and name in self._window.lost

    def holds_lost_slots(self) -> bool:
        return self._window is not None and bool(self._window.lost)

    # --- the persisted form -------------------------------------------------------------

    def snapshot(self, *, nodes: bool = True) -> dict[str, Any]:
        """The job as a JSON-ready dict, as API callers see it (secrets redacted).

        ``nodes=False`` leaves out the per-node table: a summary that costs O(1), for
        watching a 50,000-node job without shipping megabytes per change.
        """
        snap = self._fields()
        snap["options"] = redacted(self.options)
        if not nodes:
            return snap
        snap["nodes"] = {name: node_json(r) for name, r in self.nodes.items()}
        return snap

    def header(self) -> dict[str, Any]:
        """The value of the job's ``assignments`` record: secrets stay sealed."""
        return {
            **self._fields(),
            "chunks": self.chunks,
            "chunk_nodes": self.chunk_nodes,
        }

    @property
    def chunks(self) -> int:
        return -(-len(self.nodes) // self.chunk_nodes)

    def chunk_of(self, node: str) -> int:
        if not self._positions:  # targets never change after creation: index them once
            self._positions.update((name, i) for i, name in enumerate(self.nodes))
        return self._positions[node] // self.chunk_nodes

    def chunk(self, index: int) -> dict[str, Any]:
        return chunk_json(self.job_id, index, self._chunk_names(index), self.nodes)

    def chunk_bytes(self, index: int) -> bytes:
        """``orjson.dumps(self.chunk(index))``, built from cached rows."""
        names = self._chunk_names(index)
        return chunk_bytes(
            self.job_id, index, names, self.nodes, self._rows, keep=not self.finished
        )

    def _chunk_names(self, index: int) -> list[str]:
        if not self._order:
            self._order.extend(self.nodes)
        size = self.chunk_nodes
        return self._order[index * size : (index + 1) * size]

    def _fields(self) -> dict[str, Any]:
        """Every field of the job but its node table, ``options`` as they are kept; what
        ``restore`` reads back."""
        return {
            "job_id": self.job_id,
            "command": self.command,
            "state": self.state.value,
            "quorum": str(self.quorum),
            "vote_timeout_ms": self.vote_timeout_ms,
            "run_timeout_ms": self.run_timeout_ms,
            "options": self.options,
            "requested_by": self.requested_by,
            "created_ms": self.created_ms,
            "started_ms": self.started_ms,
            "vote_deadline_ms": self.vote_deadline_ms,
            "run_started_ms": self.run_started_ms,
            "run_deadline_ms": self.run_deadline_ms,
            "finished_ms": self.finished_ms,
            "busy_wait_ms": self.busy_wait_ms,
            "gate_until_ms": self.gate_until_ms,
            "approval": self.approval,
            "offline_wait_ms": self.offline_wait_ms,
            "offline_until_ms": self.offline_until_ms,
            "halt_reason": self.halt_reason,
            "summary": self.summary(),
            "targets": len(self.nodes),
            **self._batch_fields(),
        }

    def _batch_fields(self) -> dict[str, Any]:
        """A batch job's window as the CLI shows it: its size, budget and failures so far."""
        if self._window is None:
            return {}
        spec, targets = self._window.spec, len(self.nodes)
        return {
            "batch": {
                "window": spec.window(targets),
                "wait_s": spec.wait_ms / 1000,
                "max_failures": spec.budget(targets),
                "failures": sum(self._counts[s] for s in FAILURE_STATES),
                # Lost in flight, maybe still running: their slots stay taken (batch.py).
                "held": sorted(self._window.lost),
            }
        }

    @classmethod
    def restore(cls, snap: Mapping[str, Any]) -> Job:
        """Rebuild a job from ``snapshot()``; KeyError/ValueError on a damaged snapshot."""
        return cls(
            job_id=snap["job_id"],
            command=snap["command"],
            nodes={name: node_from_json(n) for name, n in snap["nodes"].items()},
            quorum=Quorum.parse(snap["quorum"]),
            vote_timeout_ms=snap["vote_timeout_ms"],
            run_timeout_ms=snap["run_timeout_ms"],
            options=dict(snap["options"]),
            requested_by=snap["requested_by"],
            state=JobState(snap["state"]),
            created_ms=snap["created_ms"],
            started_ms=snap["started_ms"],
            vote_deadline_ms=snap["vote_deadline_ms"],
            run_started_ms=snap["run_started_ms"],
            run_deadline_ms=snap["run_deadline_ms"],
            finished_ms=snap["finished_ms"],
            # A job written before ``--busy-wait`` has neither: it never waits.
            busy_wait_ms=int(snap.get("busy_wait_ms") or 0),
            gate_until_ms=snap.get("gate_until_ms"),
            approval=snap.get("approval"),  # a job written before approvals: never held
            # A job written before ``--offline-wait`` never waits for offline nodes.
            offline_wait_ms=int(snap.get("offline_wait_ms") or 0),
            offline_until_ms=snap.get("offline_until_ms"),
            halt_reason=snap.get("halt_reason"),  # a job written before ``--halt-if``: none
            chunk_nodes=int(snap.get("chunk_nodes", LEGACY_CHUNK_NODES)),
        )

    # --- voting and completion ----------------------------------------------------------

    def _require_running(self, node: str) -> None:
        if self.state is not JobState.RUNNING:
            raise StateError(f"job {self.job_id}: run reply from {node} while {self.state}")

    def _finish_node(
        self, node: str, event: NodeEvent, now_ms: int, exit_status: int | None, reason: str
    ) -> list[Effect]:
        self._require_running(node)
        out: list[Effect] = []
        self._node(node, event, now_ms, out, exit_status=exit_status, reason=reason)
        self._advance(now_ms, out)
        self._maybe_complete(now_ms, out)
        return out

    def _hear_no_more(self, now_ms: int, out: list[Effect]) -> None:
        """At the takeover grace's end: the targets still unheard and ``new`` are
        unavailable, in target order."""
        unheard = self._unheard.over(now_ms)
        if not unheard:
            return
        defer = self._offline_waits(now_ms)  # ``--offline-wait``: it waits on, ``offline``
        for name, record in self.nodes.items():
            if name in unheard and record.state is NodeState.NEW:
                if defer:
                    self._node(name, NodeEvent.DEFER, now_ms, out, reason=WAITING)
                else:
                    self._node(name, NodeEvent.UNHEARD, now_ms, out, reason=UNHEARD)

    def _maybe_end_voting(self, now_ms: int, out: list[Effect], *, deadline_passed: bool) -> None:
        if self._counts[NodeState.NEW] and not deadline_passed:
            return
        waiting = [n for n, r in self.nodes.items() if r.state is NodeState.NEW]
        for name in waiting:
            self._node(name, NodeEvent.NO_VOTE, now_ms, out, reason="no vote before the deadline")
            out.append(Send("abort", self.job_id, name))  # in case its commit arrives late
        ready = [n for n, r in self.nodes.items() if r.state is NodeState.READY]
        # Judged over the nodes that could vote: not those waited for ``offline``
        # (``offlinewait.py``). Nobody could: it runs each as it comes.
        offline = self._counts[NodeState.OFFLINE]
        voters = len(self.nodes) - offline
        if (ready or not voters) and len(ready) >= self.quorum.required(voters):
            self._job(JobEvent.QUORUM_MET, now_ms, out)
            self.run_started_ms = now_ms
            if self._window is None:
                until = self.offline_until_ms if offline else None
                self.run_deadline_ms = run_deadline_ms(
                    now_ms, self.run_timeout_ms, self.vote_timeout_ms, until
                )
                out.extend(Send("run", self.job_id, name) for name in ready)
                return
            for name in ready:
                self._node(name, NodeEvent.WAIT_TURN, now_ms, out)
                self._window.wait(name, now_ms)
            self._advance(now_ms, out)
            self._maybe_complete(now_ms, out)
            return
        self._job(JobEvent.QUORUM_MISSED, now_ms, out)
        for name in ready:
            self._node(name, NodeEvent.QUORUM_LOST, now_ms, out, reason="quorum failed")
            out.append(Send("abort", self.job_id, name))
        if offline:
            self._give_up_offline(NO_QUORUM, now_ms, out)

    def _maybe_complete(self, now_ms: int, out: list[Effect]) -> None:
        c = self._counts
        unfinished = (
            NodeState.NEW,
            NodeState.READY,
            NodeState.RUNNING,
            NodeState.WAITING,
            NodeState.OFFLINE,
        )
        if not any(c[state] for state in unfinished):
            halted = c[NodeState.SKIPPED] > 0  # only a spent failure budget skips nodes
            self._job(JobEvent.HALT if halted else JobEvent.ALL_DONE, now_ms, out)

    # --- the rolling batch: the window (``batch.py``) applied to the nodes --------------

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

    def _advance(self, now_ms: int, out: list[Effect]) -> None:
        """Give waiting nodes their turn as the window allows, or skip them all (halt). A
        job with a health signal starts nodes only on a check asked since its last start
        (``healthgate.py``): without one it asks for one and starts nothing yet."""
        window = self._window
        if window is None or self.state is not JobState.RUNNING:
            return
        failures = sum(self._counts[s] for s in FAILURE_STATES)
        step = plan(
            window.spec,
            targets=len(self.nodes),
            in_flight=self._in_flight(),
            waiting=self._counts[NodeState.WAITING],
            failures=failures,
            last_start_ms=window.last_start_ms,
            now_ms=now_ms,
        )
        budget = window.spec.budget(len(self.nodes))
        if budget is not None and failures >= budget:
            # Spent, the budget starts no node any more: nor one waited for offline, which
            # would only be asked to be skipped (``offlinewait.py``).
            if step.halt or self._counts[NodeState.OFFLINE]:
                self._halt(window, "the failure budget is spent", now_ms, out)
            return
        gate = self._gate
        if step.start and gate is not None and not gate.cleared:
            self._ask_check(gate, now_ms, out)
            return
        for _ in range(step.start):
            name = window.next_waiting(self._state_of)
            if name is None:
                break
            self._node(name, NodeEvent.TURN, now_ms, out)
            self.nodes[name].turn_ms = now_ms
            window.started(name, now_ms, self.run_timeout_ms)
            out.append(Send("run", self.job_id, name))
            if gate is not None:
                gate.spend()

    def _halt(self, window: Window, reason: str, now_ms: int, out: list[Effect]) -> None:
        """Start no node any more: the waiting ones (told to let their commit go) and
        those waited for offline are ``skipped``; the job ends ``halted`` once the
        in-flight ones finish (``_maybe_complete``)."""
        if self.halt_reason is None:
            self.halt_reason = reason[:MAX_REASON_CHARS]
        why = f"not started: {reason}"
        while (name := window.next_waiting(self._state_of)) is not None:
            self._node(name, NodeEvent.HALT, now_ms, out, reason=why)
            out.append(Send("abort", self.job_id, name))  # let its commit go
        if self._counts[NodeState.OFFLINE]:
            for name, record in self.nodes.items():
                if record.state is NodeState.OFFLINE:
                    self._node(name, NodeEvent.HALT, now_ms, out, reason=why)

    # --- the health signal (``--halt-if``): the gate (``healthgate.py``) applied ---------

    def _ask_check(self, gate: Gate, now_ms: int, out: list[Effect]) -> None:
        seq = gate.ask(now_ms)
        if seq is None:
            return  # one in flight: its answer calls ``_advance`` again
        c = self._counts
        env = (
            ("PUSHJOBS_JOB_ID", self.job_id),
            ("PUSHJOBS_TARGETS", str(len(self.nodes))),
            ("PUSHJOBS_WAITING", str(c[NodeState.WAITING] + c[NodeState.OFFLINE])),
            ("PUSHJOBS_SUCCEEDED", str(c[NodeState.SUCCEEDED])),
            ("PUSHJOBS_FAILED", str(sum(c[s] for s in FAILURE_STATES))),
        )
        out.append(Check(self.job_id, seq, gate.spec, env))

    def health(self, seq: int, ok: bool, detail: str, now_ms: int) -> list[Effect]:
        """The answer to check ``seq``: passed, the window may start nodes; failed (the
        signal fired: ``detail`` says how), the job halts. A stale answer, or one for a
        job no longer running, changes nothing."""
        out: list[Effect] = []
        gate, window = self._gate, self._window
        if gate is None or window is None or self.state is not JobState.RUNNING:
            return out
        if not gate.answer(seq, ok):
            return out
        if ok:
            self._advance(now_ms, out)
        else:
            self._fired(window, gate, detail, now_ms, out)
        self._maybe_complete(now_ms, out)
        return out

    def _fired(
        self, window: Window, gate: Gate, detail: str, now_ms: int, out: list[Effect]
    ) -> None:
        """The signal fired: halt, if anything is left to start (else it changes nothing:
        every node had its turn)."""
        if self._counts[NodeState.WAITING] or self._counts[NodeState.OFFLINE]:
            self._halt(window, f"halt-if {gate.spec.describe()}: {detail}", now_ms, out)

    def _gate_tick(self, gate: Gate, window: Window, now_ms: int, out: list[Effect]) -> None:
        """An unanswered check past its bound fires; the interval check, while nodes wait."""
        if gate.overdue(now_ms):
            gate.answer(gate.seq, False)
            waited = (gate.spec.timeout_ms + ANSWER_GRACE_MS) / 1000
            self._fired(window, gate, f"no answer within {waited:g} s", now_ms, out)
        elif gate.interval_due(now_ms) and self._left_to_start():
            self._ask_check(gate, now_ms, out)

    def _left_to_start(self) -> bool:
        return bool(self._counts[NodeState.WAITING] or self._counts[NodeState.OFFLINE])

    def _batch_tick(self, window: Window, now_ms: int, out: list[Effect]) -> None:
        """Per-node run deadlines that passed, the window's next start, held commits."""
        for name in window.expired(now_ms, self._state_of):
            self._node(name, NodeEvent.TIMEOUT, now_ms, out, reason="run timeout")
            out.append(Send("abort", self.job_id, name))
        window.lost_expired(now_ms)
        if self._gate is not None:
            self._gate_tick(self._gate, window, now_ms, out)
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
        gate = self._gate
        if gate is not None and not gate.cleared and gate.asked_ms is not None:
            due = None  # the start waits for the check's answer, not for time
        first = window.first_deadline_ms(self._state_of)
        refresh = window.refresh_due_ms if self._counts[NodeState.WAITING] else None
        lost = min(window.lost.values(), default=None)
        check = (
            gate.deadline_ms()
            if gate is not None and (gate.asked_ms is not None or self._left_to_start())
            else None
        )
        deadlines = [d for d in (due, first, refresh, lost, check) if d is not None]
        return max(min(deadlines), self._floor_ms) if deadlines else None


def _earliest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)
