"""The agent's job runner: one job at a time, never the same job twice. Pure.

Theory of operation. The runner is ``idle``, ``committed`` to one job, or ``running`` it.

    idle      --commit(ok)-->  committed   ack_commit
    idle      --commit(bad)--> idle        nack_commit (not whitelisted, env refused, seen)
    committed --unrecorded-->  idle        nack_commit (the journal cannot record it)
    committed --run-->         running     ack_run, start the process
    committed --abort-->       idle        aborted
    committed --deadline-->    idle        (the server never said run: forget the commit)
    running   --abort-->       running     kill the process group; its outcome follows
    running   --finished-->    idle        succeeded / failed / aborted

A commit for another job while busy is nacked ``busy``. Messages repeated by a server
after a failover are answered again without acting twice: a second commit of the
committed job is re-acked, a second run of the running job re-acks the run, and a run of
a job the journal has seen finish is nacked. The caller checks the journal (``seen``)
because that is I/O; the runner only decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pushjobs.protocol import messages as m

# The message each reply kind is sent as (the runner's kinds plus a process's outcomes).
REPLY_TYPES: dict[str, type[m.Message]] = {
    "ack_commit": m.AckCommit,
    "nack_commit": m.NackCommit,
    "ack_run": m.AckRun,
    "nack_run": m.NackRun,
    "aborted": m.Aborted,
    "started": m.Started,
    "succeeded": m.Succeeded,
    "failed": m.Failed,
}


class RunnerState(StrEnum):
    IDLE = "idle"
    COMMITTED = "committed"
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply to send to the server: ``kind`` is a protocol message type."""

    kind: str  # ack_commit, nack_commit, ack_run, nack_run, aborted
    job_id: str
    reason: str = ""

    def fields(self) -> dict[str, Any]:
        """The message fields of this reply (sent as ``REPLY_TYPES[kind]``)."""
        fields: dict[str, Any] = {"job_id": self.job_id}
        if self.kind in ("nack_commit", "nack_run", "aborted"):
            fields["reason"] = self.reason
        if self.kind == "aborted":
            fields["duration_ms"] = 0  # aborted before it ran
        return fields


@dataclass(frozen=True, slots=True)
class StartProcess:
    job_id: str


@dataclass(frozen=True, slots=True)
class KillProcess:
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Remember:
    """Record the job id in the journal before replying: a crash must not forget it."""

    job_id: str


Action = Reply | StartProcess | KillProcess | Remember


class JobRunner:
    def __init__(self, commit_timeout_s: float = 60.0) -> None:
        self.state = RunnerState.IDLE
        self.job_id: str | None = None
        self.command: str | None = None
        self.commit_timeout_s = commit_timeout_s
        self._commit_deadline: float | None = None

    def commit(
        self,
        job_id: str,
        command: str,
        *,
        whitelisted: bool = True,
        refusal: str | None = None,
        seen: bool,
        now: float,
    ) -> list[Action]:
        """Commit to ``job_id`` if idle; ``refusal`` is the whitelist's and env policy's
        verdict on the commit (``WhitelistFile.judge``), named in the nack.

        A second commit of the committed job is re-acked and renews the hold: the server
        repeats it while the node waits its turn in a rolling batch."""
        if self.job_id == job_id and self.state is not RunnerState.IDLE:
            if self.state is RunnerState.COMMITTED:
                self._commit_deadline = now + self.commit_timeout_s
            return [Reply("ack_commit", job_id)]
        if self.state is not RunnerState.IDLE:
            return [Reply("nack_commit", job_id, f"{m.BUSY_PREFIX}{self.job_id}")]
        if seen:
            return [Reply("nack_commit", job_id, "job already seen on this node")]
        if not whitelisted:
            return [Reply("nack_commit", job_id, f"command {command!r} is not whitelisted")]
        if refusal is not None:
            return [Reply("nack_commit", job_id, refusal)]
        self.state = RunnerState.COMMITTED
        self.job_id = job_id
        self.command = command
        self._commit_deadline = now + self.commit_timeout_s
        return [Remember(job_id), Reply("ack_commit", job_id)]

    def run(self, job_id: str) -> list[Action]:
        if self.job_id != job_id:
            return [Reply("nack_run", job_id, "not committed to this job")]
        if self.state is RunnerState.RUNNING:
            return [Reply("ack_run", job_id)]
        self.state = RunnerState.RUNNING
        self._commit_deadline = None
        return [Reply("ack_run", job_id), StartProcess(job_id)]

    def abort(self, job_id: str, reason: str = "abort requested") -> list[Action]:
        if self.job_id != job_id:
            return []
        if self.state is RunnerState.COMMITTED:
            self._reset()
            return [Reply("aborted", job_id, reason)]
        return [KillProcess(job_id, reason)]

    def unrecorded(self, job_id: str, reason: str) -> list[Action]:
        """The journal could not record the commit just taken: nack it, back to idle.
        Never ack what a crash would forget: the job could run twice."""
        if self.job_id != job_id or self.state is not RunnerState.COMMITTED:
            return []
        self._reset()
        return [Reply("nack_commit", job_id, reason)]

    def start_failed(self, job_id: str) -> None:
        """The process could not start; the caller reports the failure."""
        self.finished(job_id)

    def finished(self, job_id: str) -> None:
        """The process ended; the caller sends its outcome."""
        if self.job_id == job_id and self.state is RunnerState.RUNNING:
            self._reset()

    def tick(self, now: float) -> list[Action]:
        """Forget a commit the server never followed with a run."""
        if (
            self.state is RunnerState.COMMITTED
            and self._commit_deadline is not None
            and now >= self._commit_deadline
        ):
            job_id = self.job_id
            self._reset()
            assert job_id is not None
            return [Reply("aborted", job_id, "no run before the commit timeout")]
        return []

    def _reset(self) -> None:
        self.state = RunnerState.IDLE
        self.job_id = None
        self.command = None
        self._commit_deadline = None

    @property
    def busy(self) -> bool:
        return self.state is not RunnerState.IDLE
