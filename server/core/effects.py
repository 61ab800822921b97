"""What the job state machine asks of the daemon, in order: persist these changes, then send.

``JobChanged`` and ``NodeChanged`` become snapshot and event records (``records.py``);
a ``Send`` becomes a signed command on the node's command socket, and only after every
change before it is durable; a ``Check`` runs a job's health signal (``healthgate.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pushjobs.states import JobState, NodeState
from server.core.healthgate import HaltSpec


@dataclass(frozen=True, slots=True)
class JobChanged:
    job_id: str
    prev: JobState
    state: JobState
    at_ms: int


@dataclass(frozen=True, slots=True)
class NodeChanged:
    job_id: str
    node: str
    prev: NodeState
    state: NodeState
    at_ms: int
    exit_status: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Send:
    """A command for the daemon to deliver after it persisted the changes before it."""

    kind: str  # "commit", "run" or "abort"
    job_id: str
    node: str


@dataclass(frozen=True, slots=True)
class Check:
    """Run the job's health signal now and answer ``Job.health`` with ``seq``
    (``healthgate.py``). ``env`` is what a check command is told of the job."""

    job_id: str
    seq: int
    spec: HaltSpec
    env: tuple[tuple[str, str], ...] = ()


Effect = JobChanged | NodeChanged | Send | Check
