"""The states of a job and of each of its nodes: the words the server, the CLI and the log share.

The transitions between them are the server's (``server/core/transitions.py``); everyone else
only reads them: the CLI to render and to know when a job has ended, the pipeline to
count outcomes.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    NEW = "new"
    VOTING = "voting"
    RUNNING = "running"
    COMPLETE = "complete"
    QUORUM_FAILED = "quorum_failed"
    TIMED_OUT = "timed_out"
    ABORTED = "aborted"
    CRASHED = "crashed"
    # A batch job that stopped starting nodes once its failure budget was spent.
    HALTED = "halted"
    # A job the server's policy holds for an admin's approval (``server/core/policy.py``):
    # no node has been asked anything yet. Approved, it votes; rejected or expired, it
    # ends ``rejected``.
    AWAITING_APPROVAL = "awaiting_approval"
    REJECTED = "rejected"


class NodeState(StrEnum):
    NEW = "new"
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NACKED = "nacked"
    UNAVAILABLE = "unavailable"
    WAS_READY = "was_ready"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    ABORTED = "aborted"
    # Batch jobs: ready, waiting its turn in the window; never started (the job halted).
    WAITING = "waiting"
    SKIPPED = "skipped"
    # ``job start --offline-wait``: offline at start, never asked yet; it gets its commit
    # when it comes online before the job's deadline (``server/core/offlinewait.py``).
    OFFLINE = "offline"


TERMINAL_NODE_STATES = frozenset(NodeState) - {
    NodeState.NEW,
    NodeState.READY,
    NodeState.RUNNING,
    NodeState.WAITING,
    NodeState.OFFLINE,
}
TERMINAL_JOB_STATES = frozenset(JobState) - {
    JobState.NEW,
    JobState.AWAITING_APPROVAL,
    JobState.VOTING,
    JobState.RUNNING,
}
