"""The job's two transition tables: what each event does to a node and to the job. Pure.

One row per allowed move; a (state, event) pair that is not a key is an illegal move, and
``Job`` (``job.py``) raises ``StateError`` for it without changing anything. The theory of
operation (which input raises which event) is in ``job.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pushjobs.states import JobState, NodeState


class NodeEvent(StrEnum):
    OFFLINE_AT_START = "offline_at_start"
    ACK_COMMIT = "ack_commit"
    NACK_COMMIT = "nack_commit"
    NO_VOTE = "no_vote"
    QUORUM_LOST = "quorum_lost"
    ACK_RUN = "ack_run"
    NACK_RUN = "nack_run"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"
    LOST = "lost"
    TIMEOUT = "timeout"
    ABORT = "abort"
    # Batch jobs (``batch.py``).
    WAIT_TURN = "wait_turn"
    TURN = "turn"
    HALT = "halt"
    # A target a new leader never heard from before its takeover grace ended (``awaiting.py``).
    UNHEARD = "unheard"
    # The job was rejected, or its approval expired, before any node was asked.
    NOT_APPROVED = "not_approved"
    # ``--offline-wait`` (``offlinewait.py``): offline at start, it waits; it comes online
    # (and is asked), or the wait ends without it (the deadline, a failed quorum).
    DEFER = "defer"
    ADMIT = "admit"
    GIVE_UP = "give_up"


class JobEvent(StrEnum):
    START = "start"
    QUORUM_MET = "quorum_met"
    QUORUM_MISSED = "quorum_missed"
    ALL_DONE = "all_done"
    TIMEOUT = "timeout"
    ABORT = "abort"
    CRASH = "crash"
    HALT = "halt"
    # The server's policy (``policy.py``): held for approval, then approved or not.
    HOLD = "hold"
    APPROVE = "approve"
    REJECT = "reject"
    EXPIRE = "expire"


N, J = NodeState, JobState

NODE_TRANSITIONS: Mapping[tuple[NodeState, NodeEvent], NodeState] = {
    (N.NEW, NodeEvent.OFFLINE_AT_START): N.UNAVAILABLE,
    (N.NEW, NodeEvent.ACK_COMMIT): N.READY,
    (N.NEW, NodeEvent.NACK_COMMIT): N.NACKED,
    (N.NEW, NodeEvent.NO_VOTE): N.UNAVAILABLE,
    (N.NEW, NodeEvent.LOST): N.CRASHED,
    (N.NEW, NodeEvent.ABORT): N.ABORTED,
    (N.READY, NodeEvent.QUORUM_LOST): N.WAS_READY,
    (N.READY, NodeEvent.ACK_RUN): N.RUNNING,
    (N.READY, NodeEvent.NACK_RUN): N.NACKED,
    # A result may overtake a lost ack_run: the node did run.
    (N.READY, NodeEvent.SUCCEEDED): N.SUCCEEDED,
    (N.READY, NodeEvent.FAILED): N.FAILED,
    (N.READY, NodeEvent.ABORTED): N.ABORTED,
    (N.READY, NodeEvent.LOST): N.CRASHED,
    (N.READY, NodeEvent.TIMEOUT): N.TIMED_OUT,
    (N.READY, NodeEvent.ABORT): N.ABORTED,
    (N.RUNNING, NodeEvent.SUCCEEDED): N.SUCCEEDED,
    (N.RUNNING, NodeEvent.FAILED): N.FAILED,
    (N.RUNNING, NodeEvent.ABORTED): N.ABORTED,
    (N.RUNNING, NodeEvent.LOST): N.CRASHED,
    (N.RUNNING, NodeEvent.TIMEOUT): N.TIMED_OUT,
    (N.RUNNING, NodeEvent.ABORT): N.ABORTED,
    # A batch job's ready nodes past the window wait their turn, holding their commit.
    (N.READY, NodeEvent.WAIT_TURN): N.WAITING,
    (N.WAITING, NodeEvent.TURN): N.READY,
    (N.WAITING, NodeEvent.HALT): N.SKIPPED,
    # The agent let the commit go (its commit timeout) before the node's turn came.
    (N.WAITING, NodeEvent.ABORTED): N.ABORTED,
    (N.WAITING, NodeEvent.LOST): N.CRASHED,
    (N.WAITING, NodeEvent.ABORT): N.ABORTED,
    # Right after a takeover: a target still unheard at the grace's end was never asked.
    (N.NEW, NodeEvent.UNHEARD): N.UNAVAILABLE,
    # Never asked: a job that was not approved skips every target.
    (N.NEW, NodeEvent.NOT_APPROVED): N.SKIPPED,
    # Offline at start under ``--offline-wait``: never asked until it comes online.
    (N.NEW, NodeEvent.DEFER): N.OFFLINE,
    (N.OFFLINE, NodeEvent.ADMIT): N.NEW,
    (N.OFFLINE, NodeEvent.GIVE_UP): N.UNAVAILABLE,
    (N.OFFLINE, NodeEvent.ABORT): N.ABORTED,
    # A batch job's failure budget is spent: it starts no node any more.
    (N.OFFLINE, NodeEvent.HALT): N.SKIPPED,
    # The job ended under it (run deadline, server crash): it was never asked.
    (N.OFFLINE, NodeEvent.TIMEOUT): N.UNAVAILABLE,
    (N.OFFLINE, NodeEvent.LOST): N.UNAVAILABLE,
}

JOB_TRANSITIONS: Mapping[tuple[JobState, JobEvent], JobState] = {
    (J.NEW, JobEvent.START): J.VOTING,
    (J.NEW, JobEvent.ABORT): J.ABORTED,
    (J.NEW, JobEvent.HOLD): J.AWAITING_APPROVAL,
    (J.AWAITING_APPROVAL, JobEvent.APPROVE): J.VOTING,
    (J.AWAITING_APPROVAL, JobEvent.REJECT): J.REJECTED,
    (J.AWAITING_APPROVAL, JobEvent.EXPIRE): J.REJECTED,
    (J.AWAITING_APPROVAL, JobEvent.ABORT): J.ABORTED,
    (J.VOTING, JobEvent.QUORUM_MET): J.RUNNING,
    (J.VOTING, JobEvent.QUORUM_MISSED): J.QUORUM_FAILED,
    (J.VOTING, JobEvent.ABORT): J.ABORTED,
    (J.VOTING, JobEvent.CRASH): J.CRASHED,
    (J.RUNNING, JobEvent.ALL_DONE): J.COMPLETE,
    (J.RUNNING, JobEvent.TIMEOUT): J.TIMED_OUT,
    (J.RUNNING, JobEvent.ABORT): J.ABORTED,
    (J.RUNNING, JobEvent.CRASH): J.CRASHED,
    (J.RUNNING, JobEvent.HALT): J.HALTED,
}
