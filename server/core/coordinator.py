"""The job coordinator: every job of this server, fed by replies, node events, heartbeats
and time. Pure.

Theory of operation. Each job is a ``Job`` state machine (``job.py``); the coordinator
routes inputs to the jobs they concern and returns the effects in order, so the daemon
can persist the changes before it sends the commands that follow from them.

- ``submit`` creates a job and starts it on the nodes online now; right after a takeover,
  the targets this leader has not heard yet are waited for until the grace ends
  (``awaiting.py``) instead of being ``unavailable`` at once;
- ``reply`` routes a node's ack/nack/result to its job; a reply the job's table does not
  allow (a result after a timeout, a duplicate re-sent after a failover) is *late*: it is
  counted and changes nothing;
- ``node_lost`` (offline, restarted, revoked) crashes the node in every active job;
- ``node_online`` answers a node that (re)appeared with what it should have got: a
  ``commit`` while its job votes, a ``run`` while it is ready in a running job. That is how
  commands lost in a server restart or a network blip are sent again; the agent answers
  repeats idempotently and never runs a job twice. A batch job's ``waiting`` node gets
  nothing: its turn has not come (``batch.py``). A target a job waited to hear from is
  heard now, and gets its commit the same way;
- ``admit``: a node that comes online while a job waits for it ``offline`` (``job start
  --offline-wait``, ``offlinewait.py``) is asked to commit: a change of its state, so
  (unlike ``node_online``'s repeats) it is returned as changes, to persist before the
  commit leaves. One job at a time, the first started first, and only while no other
  job holds the node: a laptop back with three jobs waiting for it runs them in turn
  rather than refusing two ``busy``. A node let go by a job while another waits for it
  is in ``take_freed``, for the caller to admit again if it is online. An ``offline``
  node holds nothing: a busy-wait job does not wait for it;
- a node's heartbeat says what it is doing: ``busy_with`` (the job the agent holds or
  runs) and ``busy_state`` (``committed`` or ``running``). ``heard`` lets a batch slot go
  that a node lost in flight no longer holds; ``unreported`` judges the commands the node
  should have had and did not, ``stale_hold`` a job it still holds that is over for it.
  Both only read the jobs; the caller sends and rate-limits;
- a node that nacks a commit ``busy`` with a job that is over for it (its abort was lost
  with an edge, or is still on its way: ``job abort`` then ``job start`` at once) is not
  counted as a no at once: it is told again to let that job go, and its commit is sent
  again at its next heartbeat (``unreported``), up to ``STALE_BUSY_TRIES`` times; a node
  still busy after that votes no, saying so;
- ``tick`` applies vote and run deadlines, and a held job's approval expiry;
- ``health`` hands a batch job the answer to its health check (``--halt-if``,
  ``healthgate.py``): the window starts its next nodes, or the job halts;
- a job the server's policy holds (``submit`` with ``hold``, ``policy.py``) is created
  ``awaiting_approval`` and holds none of its nodes (it is not indexed by node: a node's
  heartbeat, loss or return concerns it not, and a busy-wait job does not wait for it);
  ``approve`` begins its vote then, as ``submit`` would have, and ``reject`` ends it;
- a job that may wait for busy nodes (``Job.busy_wait_ms``, ``busywait.py``) and finds one
  of its targets held by another job waits, *gated*, asking no node to commit; after every
  input that may have freed a node (a reply, a lost node, an abort, a tick) the gated
  jobs are looked at in creation order (``_release``): one whose targets are free now, or
  whose bound passed, begins its vote.

Every job has a ``version`` that grows with each change, for watchers. Time is wall ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pushjobs.errors import StateError
from pushjobs.protocol.messages import (
    BUSY_PREFIX,
    Aborted,
    AckCommit,
    AckRun,
    Failed,
    JobOutput,
    Message,
    NackCommit,
    NackRun,
    Started,
    Succeeded,
)
from pushjobs.quorum import Quorum
from pushjobs.states import TERMINAL_NODE_STATES, JobState, NodeState
from server.core.busywait import Blocked, Claims
from server.core.effects import Effect, JobChanged, NodeChanged, Send
from server.core.finished import Finished, option_bytes
from server.core.job import Job
from server.core.policy import Hold


@dataclass(frozen=True, slots=True)
class JobCreated:
    job_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class OutputReceived:
    job_id: str
    node: str
    output: JobOutput
    exit_status: int | None


@dataclass(frozen=True, slots=True)
class NodeAmended:
    """A node's row changed without a change of state: its agent reported processes of the
    job it could not kill (``left_running``), maybe after the node had ended."""

    job_id: str
    node: str


Change = Effect | JobCreated | OutputReceived | NodeAmended


# Node states in which a job does not hold its node: it ended, or was never asked.
_NOT_HOLDING = TERMINAL_NODE_STATES | {NodeState.OFFLINE}

# Job states in which a node may still vote: the vote, and a late voter's in a running job.
_VOTES = frozenset({JobState.VOTING, JobState.RUNNING})

STALE_BUSY_TRIES = 2
"""How many ``busy`` nacks naming a job over for the node are not counted as its vote: each
is answered by an ``abort`` of that job; the commit follows at the node's next heartbeat."""


class Coordinator:
    def __init__(
        self,
        keep_finished: int = 10_000,
        keep_finished_nodes: int = 500_000,
        keep_finished_option_bytes: int = 64_000_000,
        keep_finished_output_bytes: int = 100_000_000,
    ) -> None:
        self.finished = Finished(
            keep_finished,
            keep_finished_nodes,
            keep_finished_option_bytes,
            keep_finished_output_bytes,
        )
        self.jobs: dict[str, Job] = {}
        self.versions: dict[str, int] = {}
        self.outputs: dict[tuple[str, str], OutputReceived] = {}
        self._output_nodes: dict[str, list[str]] = {}  # job id -> nodes in ``outputs``
        self.late: Counter[str] = Counter()
        self._active_by_node: dict[str, set[str]] = {}
        # Jobs not finished, in creation order: every loop turn asks for their deadlines,
        # and up to ``keep_finished`` finished jobs must not make each turn O(jobs).
        self._active: dict[str, Job] = {}
        # node -> batch jobs holding its slot since it was lost in flight (``batch.py``).
        self._lost_slots: dict[str, set[str]] = {}
        # Jobs not finished per ``requested_by``, for the per-caller bound (``handlers.py``).
        self._unfinished_by: Counter[str] = Counter()
        # Jobs whose version moved (or that were forgotten) since ``take_touched``: parked
        # watches look at these only, so a turn costs O(changed jobs), not O(watches).
        self.touched: set[str] = set()
        # Jobs waiting for busy nodes before their vote, in creation order (``_release``).
        self._gated: dict[str, Job] = {}
        # (job, node) -> its ``busy`` nacks not counted (``_stale_busy``); gone with the job.
        self._stale_busy: Counter[tuple[str, str]] = Counter()
        self.stale_busy_nacks = 0  # not counted as votes, in all (``server.info``)
        # Active jobs that may wait for offline nodes, and the nodes a job let go while one
        # of them waits (``admit``, ``take_freed``).
        self._offline_jobs: set[str] = set()
        self._freed: set[str] = set()

    # --- inputs ---------------------------------------------------------------------------

    def submit(
        self,
        job_id: str,
        command: str,
        targets: Iterable[str],
        online: Iterable[str],
        now_ms: int,
        *,
        quorum: Quorum,
        vote_timeout_ms: int,
        run_timeout_ms: int,
        options: Mapping[str, Any],
        requested_by: str,
        unheard: Iterable[str] = (),
        unheard_until_ms: int | None = None,
        busy_wait_ms: int = 0,
        offline_wait_ms: int = 0,
        hold: Hold | None = None,
    ) -> list[Change]:
        """Create a job and start it; with ``hold`` it waits for approval instead."""
        if job_id in self.jobs:
            raise StateError(f"job {job_id} exists already")
        job = Job.new(
            job_id,
            command,
            targets,
            now_ms,
            quorum=quorum,
            vote_timeout_ms=vote_timeout_ms,
            run_timeout_ms=run_timeout_ms,
            options=dict(options),
            requested_by=requested_by,
            busy_wait_ms=busy_wait_ms,
            offline_wait_ms=offline_wait_ms,
        )
        self._add(job)
        out: list[Change] = [JobCreated(job_id, now_ms)]
        if hold is not None:
            out += job.hold(hold, now_ms)
            self._after(job, out)
            return out
        out += job.start(
            online,
            now_ms,
            unheard=unheard,
            unheard_until_ms=unheard_until_ms,
            busy=self._busy(job),
        )
        if job.gated:
            self._gated[job_id] = job
        self._after(job, out)
        return out

    def _busy(self, job: Job) -> dict[str, Blocked]:
        if job.busy_wait_ms <= 0:
            return {}
        # In line behind the jobs that wait already: none is overtaken.
        return self._claims().blocked(job.nodes)

    def approve(
        self,
        job_id: str,
        by: str,
        online: Iterable[str],
        now_ms: int,
        *,
        reason: str = "",
        unheard: Iterable[str] = (),
        unheard_until_ms: int | None = None,
    ) -> list[Change]:
        """A held job approved by ``by``: its vote begins (``StateError`` if not held)."""
        job = self.jobs[job_id]
        busy = self._busy(job)
        out: list[Change] = list(
            job.approve(
                by,
                online,
                now_ms,
                reason=reason,
                unheard=unheard,
                unheard_until_ms=unheard_until_ms,
                busy=busy,
            )
        )
        if job.gated:
            self._gated[job_id] = job
        self._after(job, out)
        self._index(job, job.nodes)  # it holds its nodes from now on
        return out

    def reject(self, job_id: str, by: str, reason: str, now_ms: int) -> list[Change]:
        """A held job rejected by ``by``: it ends (``StateError`` if not held)."""
        job = self.jobs[job_id]
        out: list[Change] = list(job.reject(by, reason, now_ms))
        self._after(job, out)
        return out

    def reply(self, message: Message, now_ms: int) -> list[Change]:
        """Apply a node's reply; [] (counted in ``late``) if its job cannot take it."""
        job_id = getattr(message, "job_id", None)
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            self.late["unknown_job"] += 1
            return []
        node = message.sender
        out: list[Change] = []
        try:
            match message:
                case AckCommit():
                    out += job.ack_commit(node, now_ms)
                case NackCommit(reason=reason):
                    let_go = self._stale_busy_nack(job, node, reason)
                    if let_go is not None:
                        return [let_go]
                    out += job.nack_commit(node, now_ms, reason)
                case AckRun():
                    out += job.ack_run(node, now_ms)
                case NackRun(reason=reason):
                    out += job.nack_run(node, now_ms, reason)
                case Started():
                    return []
                case Succeeded(exit_status=status):
                    out += job.succeeded(node, now_ms, status)
                case Failed(exit_status=status, reason=reason):
                    out += job.failed(node, now_ms, status, reason)
                case Aborted(reason=reason):
                    out += job.aborted(node, now_ms, reason)
                case _:
                    self.late["not_a_reply"] += 1
                    return []
        except StateError:
            self.late[message.TYPE] += 1
            # The node ended already (the server aborted it, or timed it out, and then its
            # agent reported): what the agent could not kill still belongs in its row.
            out = self._left_running(job, node, message)
            self._after(job, out)
            return out
        out += self._left_running(job, node, message)
        output = getattr(message, "output", None)
        if isinstance(output, JobOutput):
            received = OutputReceived(
                job.job_id, node, output, getattr(message, "exit_status", None)
            )
            self.outputs[(job.job_id, node)] = received
            self._output_nodes.setdefault(job.job_id, []).append(node)
            out.append(received)
        self._after(job, out)
        # Gated jobs are looked at on the next tick (every turn), not per reply: a pass
        # costs O(their nodes), and a 100,000-node job brings 300,000 replies.
        return out

    def _stale_busy_nack(self, job: Job, node: str, reason: str) -> Send | None:
        """The ``abort`` to send instead of counting a ``busy`` nack that names a job over
        for ``node``; None to count the nack (a real holder, or tries spent). While the job
        votes, or runs and ``node`` is a late voter (``--offline-wait``): a node back from a
        long absence is the likeliest to still hold a job that ended while it was away."""
        if not reason.startswith(BUSY_PREFIX) or job.state not in _VOTES:
            return None
        record = job.nodes.get(node)
        if record is None or record.state is not NodeState.NEW:
            return None
        holder = reason[len(BUSY_PREFIX) :]
        let_go = None if holder == job.job_id else self.stale_hold(node, holder, "committed")
        key = (job.job_id, node)
        if let_go is None or self._stale_busy[key] >= STALE_BUSY_TRIES:
            return None
        self._stale_busy[key] += 1
        self.stale_busy_nacks += 1
        return let_go

    def _left_running(self, job: Job, node: str, message: Message) -> list[Change]:
        left = getattr(message, "left_running", ())
        if not left or not job.note_left_running(node, left):
            return []
        return [NodeAmended(job.job_id, node)]

    def node_lost(
        self, node: str, now_ms: int, reason: str, *, restarted: bool = False
    ) -> list[Change]:
        out: list[Change] = []
        for job_id in list(self._active_by_node.get(node, ())):
            job = self.jobs[job_id]
            changes: list[Change] = list(job.node_lost(node, now_ms, reason, restarted=restarted))
            if job.holds_slot(node):
                self._lost_slots.setdefault(node, set()).add(job_id)
            self._after(job, changes)
            out += changes
        return out  # gated jobs: on the next tick, as for replies

    def node_online(self, node: str) -> list[Send]:
        """Commands to repeat to a node that (re)appeared; no job or node state changes
        (a job that waited to hear from it stops waiting)."""
        out: list[Send] = []
        for job_id in self._active_by_node.get(node, ()):
            job = self.jobs[job_id]
            job.heard(node)
            state = job.nodes[node].state
            if job.gated:
                continue  # asked once its wait ends (``_release``)
            if job.state.value == "voting" and state is NodeState.NEW:
                out.append(Send("commit", job_id, node))
            elif job.state.value == "running" and state is NodeState.NEW:
                out.append(Send("commit", job_id, node))  # a late voter's (``admit``)
            elif job.state.value == "running" and state is NodeState.READY:
                out.append(Send("run", job_id, node))
        return out

    def admit(self, node: str, now_ms: int) -> list[Change]:
        """``node`` is online and free: the first job started that waits for it
        ``offline`` asks it to commit (``Job.admit``), the move before the commit, to
        persist first. None while another job holds it: asked once it is let go."""
        if not self._offline_jobs or self._holder(node) is not None:
            return []
        waiting = [
            job
            for job_id in self._active_by_node.get(node, ())
            if (job := self.jobs[job_id]).nodes[node].state is NodeState.OFFLINE
        ]
        for job in sorted(waiting, key=lambda j: (j.created_ms, j.job_id)):
            changes: list[Change] = list(job.admit(node, now_ms))
            if changes:
                self._after(job, changes)
                return changes
        return []

    def gone(self, node: str, now_ms: int, reason: str) -> list[Change]:
        """``node`` cannot come back (its key was revoked): every job that waits for it
        ``offline`` gives it up now (``Job.give_up``), rather than at its deadline."""
        out: list[Change] = []
        for job_id in list(self._active_by_node.get(node, ())):
            job = self.jobs[job_id]
            changes: list[Change] = list(job.give_up(node, now_ms, reason))
            self._after(job, changes)
            out += changes
        return out

    def take_freed(self) -> set[str]:
        """Nodes let go by a job since the last call while another waits for them
        ``offline``: to ``admit`` if they are online."""
        freed, self._freed = self._freed, set()
        return freed

    def undeliverable(self, job_id: str, node: str, now_ms: int, reason: str) -> list[Change]:
        """A commit that can never reach ``node`` (``CommandSender.take_undeliverable``):
        its vote is no, with ``reason``, rather than silence until the vote deadline."""
        job = self.jobs.get(job_id)
        record = job.nodes.get(node) if job is not None else None
        if job is None or record is None or record.state is not NodeState.NEW:
            return []
        if job.state is not JobState.VOTING:
            return []
        out: list[Change] = list(job.nack_commit(node, now_ms, reason))
        self._after(job, out)
        return out + self._release(now_ms)

    def abort(self, job_id: str, now_ms: int, reason: str) -> list[Change]:
        job = self.jobs[job_id]
        out: list[Change] = list(job.abort(now_ms, reason))
        self._after(job, out)
        return out + self._release(now_ms)

    def health(self, job_id: str, seq: int, ok: bool, detail: str, now_ms: int) -> list[Change]:
        """The answer to a job's health check (``healthgate.py``); nothing for a job gone."""
        job = self._active.get(job_id)
        if job is None:
            return []
        out: list[Change] = list(job.health(seq, ok, detail, now_ms))
        self._after(job, out)
        return out + self._release(now_ms)

    def tick(self, now_ms: int) -> list[Change]:
        out: list[Change] = []
        for job in self.active():
            deadline = job.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                changes: list[Change] = list(job.tick(now_ms))
                self._after(job, changes)
                out += changes
        return out + self._release(now_ms)  # bounds passed, nodes freed by a deadline

    def restore(self, job: Job, version: int) -> None:
        """Put back a job read from the log (recovery)."""
        self._add(job)
        self.versions[job.job_id] = version
        self.touched.add(job.job_id)
        self._index(job, job.nodes)
        for name in job.nodes if job.holds_lost_slots() else ():
            if job.holds_slot(name):
                self._lost_slots.setdefault(name, set()).add(job.job_id)
        if job.finished:
            self._retire(job.job_id)
        elif job.gated:
            self._gated[job.job_id] = job  # restored in log order: creation order

    # --- waiting for busy nodes ------------------------------------------------------------

    def _holder(self, node: str) -> str | None:
        """A job that holds ``node`` (it votes or runs there); a gated job holds nothing."""
        for job_id in self._active_by_node.get(node, ()):
            job = self.jobs[job_id]
            if not job.gated and job.nodes[node].state not in _NOT_HOLDING:
                return job_id
        return None

    def _claims(self) -> Claims:
        """A pass over the gated jobs in line, each one's nodes claimed."""
        claims = Claims(self._holder)
        for job in self._gated.values():
            claims.claim(job.job_id, job.gate_nodes())
        return claims

    def _release(self, now_ms: int) -> list[Change]:
        """Gated jobs, in line: each whose targets are free, or whose bound passed, begins
        its vote; each other one's rows say what it waits for now."""
        if not self._gated:
            return []
        out: list[Change] = []
        claims = Claims(self._holder)
        for job_id, job in list(self._gated.items()):
            if not job.gated:  # ended meanwhile (aborted, its nodes lost)
                del self._gated[job_id]
                continue
            nodes = job.gate_nodes()
            blocked = claims.blocked(nodes)
            going = not blocked or now_ms >= (job.gate_until_ms or 0)
            claims.claim(job_id, nodes, went=going)
            changes: list[Change]
            if going:
                del self._gated[job_id]
                changes = list(job.open(now_ms, blocked))
            else:
                changes = [NodeAmended(job_id, n) for n in job.note_busy(blocked)]
            self._after(job, changes)
            out += changes
        return out

    # --- heartbeats: what a node says it is doing -----------------------------------------

    def heard(
        self, node: str, busy_with: str | None, busy_state: str | None, now_ms: int
    ) -> list[Change]:
        """A heartbeat: batch jobs holding the slot of ``node`` (lost while in flight) let
        it go unless the node says it still holds or runs that job."""
        out: list[Change] = []
        for job_id in list(self._lost_slots.get(node, ())):
            if job_id == busy_with and busy_state in ("committed", "running"):
                continue
            self._lost_slots[node].discard(job_id)
            if (job := self.jobs.get(job_id)) is not None:
                changes: list[Change] = list(job.release_slot(node, now_ms))
                self._after(job, changes)
                out += changes
        if not self._lost_slots.get(node, True):
            del self._lost_slots[node]
        return out

    def unreported(
        self, node: str, busy_with: str | None, busy_state: str | None = None
    ) -> list[Send]:
        """Commands to send again, judged from what a node's heartbeat says it is doing.

        - ``commit`` while the job votes and the node's vote is not recorded: the commit
          was lost (a full queue, a blip), or the node's ack was (sent to a server that
          died, or while no server led). A node that holds the job re-acks it; one busy
          with another job nacks ``busy``: either way the vote is counted.
        - ``run`` for a running job the node should run but says it is not busy with: a
          node that finished it (its result sent while no leader listened) answers with
          its stored outcome; one that never had the job answers ``nack_run``.
        - ``run`` when the node says it is still only ``committed`` to a running job in
          which it is ready: the run was lost.

        The caller rate-limits; a repeat is always safe (the agent never runs twice).
        """
        out: list[Send] = []
        for job_id in self._active_by_node.get(node, ()):
            job = self.jobs[job_id]
            state = job.nodes[node].state
            if job.gated:
                continue  # no commit asked yet: nothing was lost
            if state is NodeState.NEW and job.state.value in ("voting", "running"):
                out.append(Send("commit", job_id, node))  # running: a late voter's
            elif job.state.value == "running":
                lost_result = job_id != busy_with and state in (NodeState.READY, NodeState.RUNNING)
                lost_run = (
                    job_id == busy_with and busy_state == "committed" and state is NodeState.READY
                )
                if lost_result or lost_run:
                    out.append(Send("run", job_id, node))
        return out

    def stale_hold(self, node: str, busy_with: str | None, busy_state: str | None) -> Send | None:
        """An ``abort`` for a job a node holds or runs that is over for it; else None.

        A node that acted on a commit late (it was paused through the vote, or its vote
        came after the job ended) would otherwise stay committed until its own commit
        timeout, refusing every other job as ``busy``; one that was paused or cut off while
        it ran is reported ``crashed`` while its command runs on. The job has ended, or
        ended for this node (crashed, unavailable, quorum lost, timed out), or is not known
        at all (only a job retired long after it ended is): the node is told to let go.
        """
        if busy_with is None or busy_state not in ("committed", "running"):
            return None
        job = self.jobs.get(busy_with)
        if job is not None and not job.finished:
            record = job.nodes.get(node)
            if record is not None and record.state not in TERMINAL_NODE_STATES:
                return None
        return Send("abort", busy_with, node)

    # --- queries --------------------------------------------------------------------------

    def active(self) -> Iterator[Job]:
        return iter(list(self._active.values()))

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for job in self.active() if (d := job.next_deadline_ms()) is not None]
        return min(deadlines, default=None)

    def view(self, job_id: str, *, nodes: bool = True) -> dict[str, Any]:
        snap = self.jobs[job_id].snapshot(nodes=nodes)
        snap["version"] = self.versions.get(job_id, 0)
        return snap

    def take_touched(self) -> set[str]:
        """The jobs changed or forgotten since the last call."""
        touched, self.touched = self.touched, set()
        return touched

    def holding(self, node: str) -> list[str]:
        """The active jobs in which ``node`` has not finished (it may hold or run them);
        not those that wait for it ``offline``: it was never asked."""
        return [
            job_id
            for job_id in self._active_by_node.get(node, ())
            if self.jobs[job_id].nodes[node].state not in _NOT_HOLDING
        ]

    def targets_pending(self, node: str) -> bool:
        return bool(self._active_by_node.get(node))

    def unfinished_by(self, caller: str) -> int:
        """How many jobs ``caller`` requested that have not finished (new, voting, running)."""
        return self._unfinished_by.get(caller, 0)

    # --- internals ------------------------------------------------------------------------

    def _add(self, job: Job) -> None:
        self.jobs[job.job_id] = job
        if not job.finished and job.offline_wait_ms > 0:
            self._offline_jobs.add(job.job_id)
        if not job.finished:
            if job.job_id not in self._active:
                self._unfinished_by[job.requested_by] += 1
            self._active[job.job_id] = job
        self.versions.setdefault(job.job_id, 0)
        self.touched.add(job.job_id)

    def _after(self, job: Job, changes: list[Change]) -> None:
        if not changes:
            return
        self.versions[job.job_id] = self.versions.get(job.job_id, 0) + 1
        self.touched.add(job.job_id)
        if job.finished:
            self._index(job, job.nodes)
            self._retire(job.job_id)
        elif isinstance(changes[0], JobCreated):
            self._index(job, job.nodes)
        else:
            # Only the nodes that changed: a reply must not cost O(targets).
            self._index(job, {c.node for c in changes if isinstance(c, NodeChanged)})
        if self._offline_jobs:
            self._note_freed(changes)

    def _note_freed(self, changes: list[Change]) -> None:
        """The nodes ``changes`` let go (asked, now ended) that a job waits for ``offline``."""
        for c in changes:
            if (
                isinstance(c, NodeChanged)
                and c.state in TERMINAL_NODE_STATES
                and c.prev is not NodeState.OFFLINE
                and len(self._active_by_node.get(c.node, ())) > 0
            ):
                self._freed.add(c.node)

    def _index(self, job: Job, names: Iterable[str]) -> None:
        if job.awaiting_approval:
            return  # it holds no node until approved
        for name in names:
            record = job.nodes[name]
            jobs = self._active_by_node.get(name)
            if job.finished or record.state in TERMINAL_NODE_STATES:
                if jobs is not None:
                    jobs.discard(job.job_id)
                    if not jobs:
                        del self._active_by_node[name]
            else:
                self._active_by_node.setdefault(name, set()).add(job.job_id)

    def _retire(self, job_id: str) -> None:
        job = self.jobs[job_id]
        self._offline_jobs.discard(job_id)
        for key in [k for k in self._stale_busy if k[0] == job_id]:  # rare: a few at most
            del self._stale_busy[key]
        if self._active.pop(job_id, None) is not None:
            self._unfinished_by[job.requested_by] -= 1
            if not self._unfinished_by[job.requested_by]:
                del self._unfinished_by[job.requested_by]
        if job_id in self.finished:
            return
        captured = (self.outputs[(job_id, n)].output for n in self._output_nodes.get(job_id, ()))
        output_bytes = sum(len(o.stdout) + len(o.stderr) for o in captured)
        for old in self.finished.add(
            job_id, len(job.nodes), option_bytes(job.options), output_bytes
        ):
            self.jobs.pop(old, None)
            self.versions.pop(old, None)
            self.touched.add(old)
            for node in self._output_nodes.pop(old, ()):  # not a pass over every output
                self.outputs.pop((old, node), None)


def changed_jobs(changes: Iterable[Change]) -> list[str]:
    """Job ids touched by ``changes``, in first-touch order."""
    seen: dict[str, None] = {}
    for change in changes:
        if isinstance(change, JobChanged | NodeChanged | JobCreated | OutputReceived | NodeAmended):
            seen[change.job_id] = None
    return list(seen)
