"""What an agent sends its server: queued replies, its heartbeats, and job outcomes.

Every message leaves through one session ``Outbox`` (this node's sequence, signed with the
HMAC session key from discovery; none before the first config) and the PUSH socket of the
server link, never blocking the loop:

- replies (acks, nacks, starts, outcomes) wait in a queue until the server is online and
  the socket takes them; the queue is bounded, and when full the oldest reply is dropped
  (logged). A reply too big for the server's body limit has its output shrunk (half of
  each channel's tail, marked truncated) until it fits, or is dropped if it has none;
- its own heartbeat every interval, dropped rather than queued if it cannot leave now
  (a late heartbeat is worthless);
- each outcome is also stored in the journal first (held in memory if the journal
  cannot be written: ``agent.journalwrites``), and the most recent one is queued again
  after every discovery, so a result survives a server restart (the new server knows
  only the new session key).

Killed at any line: queued replies are lost, except outcomes, which the journal holds
(written before they are queued) and the restarted agent resends after its first
discovery. Acks need no copy: the server asks again and the runner answers the same.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from typing import Any

import orjson
import zmq

from agent.executor import Outcome
from agent.journal import Journal
from agent.journalwrites import JournalWrites
from agent.runner import REPLY_TYPES
from pushjobs.errors import OversizedFrame
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Signer

log = logging.getLogger("pushjobs.agent")

MAX_QUEUED_REPLIES = 10_000
MAX_SHRINKS = 24


class Outbound:
    def __init__(
        self,
        name: str,
        incarnation: str,
        command_endpoint: str,
        journal: Journal,
        *,
        next_beat: float,
        max_queued: int = MAX_QUEUED_REPLIES,
        writes: JournalWrites | None = None,
    ) -> None:
        self.name = name
        self.incarnation = incarnation
        self.command_endpoint = command_endpoint
        self.journal = journal
        self.writes = writes if writes is not None else JournalWrites(journal)
        self.max_queued = max_queued
        self.outbox: Outbox | None = None
        self.queued: deque[tuple[type[m.Message], dict[str, Any]]] = deque()
        self.next_beat = next_beat
        self.interval_s = 1.0

    @property
    def key_id(self) -> str | None:
        """The session key replies are signed with now (None before the first config)."""
        return None if self.outbox is None else self.outbox.signer.key_id

    def rekey(self, signer: Signer, limits: Limits, interval_s: float) -> None:
        """Sign with a new session key; the sequence goes on."""
        if self.outbox is None:
            self.outbox = Outbox(self.name, self.incarnation, signer, limits)
        else:
            self.outbox.reseal(signer)
            self.outbox.limits = limits
        self.interval_s = interval_s

    # --- replies ------------------------------------------------------------------------

    def queue(self, cls: type[m.Message], fields: dict[str, Any]) -> None:
        if len(self.queued) >= self.max_queued:
            log.error("reply queue full; dropping the oldest reply")
            self.queued.popleft()
        self.queued.append((cls, fields))

    def outcome(self, job_id: str, kind: str, fields: dict[str, Any], at_ms: int) -> None:
        """A job ended: store its outcome in the journal (or memory), then queue it."""
        fields = {"job_id": job_id, **fields}
        body = orjson.dumps({k: _plain(v) for k, v in fields.items()})
        self.writes.store_outcome(job_id, kind, body, at_ms)
        self.queue(REPLY_TYPES[kind], fields)

    def resend(self, job_id: str, kind: str, body: bytes) -> None:
        """Queue again an outcome as the journal stored it."""
        fields = orjson.loads(body)
        if isinstance(fields.get("output"), dict):
            fields["output"] = m.JobOutput(**fields["output"])
        if isinstance(fields.get("left_running"), list):
            fields["left_running"] = tuple(fields["left_running"])
        fields["job_id"] = job_id
        self.queue(REPLY_TYPES[kind], fields)

    def resend_last(self, since_ms: int) -> None:
        """Queue again the most recent outcome stored since ``since_ms``, if any."""
        last = self.writes.last_outcome(since_ms)
        if last is not None:
            self.resend(*last)

    def flush(self, push: zmq.Socket[bytes] | None, now_ms: int) -> None:
        """Send what the socket takes now, oldest first; the rest waits for the next turn."""
        if push is None or self.outbox is None:
            return
        while self.queued:
            cls, fields = self.queued[0]
            frames = self._seal(self.outbox, cls, fields, now_ms)
            if frames is None:
                self.queued.popleft()
                continue
            try:
                push.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                return  # the queue to the server is full: try again next turn
            self.queued.popleft()

    def _seal(
        self, outbox: Outbox, cls: type[m.Message], fields: dict[str, Any], now_ms: int
    ) -> list[bytes] | None:
        for _ in range(MAX_SHRINKS):
            try:
                return outbox.frames(cls, now_ms, **fields)
            except OversizedFrame:
                output = fields.get("output")
                if not isinstance(output, m.JobOutput):
                    break
                fields = {**fields, "output": shrink(output)}
        log.error("cannot fit a %s reply into the size limit; dropped", cls.TYPE)
        return None

    # --- heartbeats ---------------------------------------------------------------------

    def beat_now(self, now: float) -> None:
        self.next_beat = now

    def beat_due(self, now: float) -> bool:
        return now >= self.next_beat

    def heartbeat(
        self,
        push: zmq.Socket[bytes] | None,
        now: float,
        now_ms: int,
        *,
        job_id: str | None,
        job_state: str | None,
    ) -> None:
        """Send a heartbeat if the socket takes it now; the next one is due an interval on."""
        self.next_beat = now + self.interval_s
        if push is None or self.outbox is None:
            return
        frames = self.outbox.frames(
            m.NodeHeartbeat,
            now_ms,
            command_endpoint=self.command_endpoint,
            job_id=job_id,
            job_state=job_state,
        )
        with contextlib.suppress(zmq.Again):  # a queued heartbeat is worthless
            push.send_multipart(frames, zmq.NOBLOCK)


def outcome_reply(outcome: Outcome, capture: bool) -> tuple[str, dict[str, Any]]:
    """The reply kind and fields (without the job id) that report ``outcome``."""
    output = m.JobOutput(
        outcome.stdout, outcome.stderr, outcome.stdout_truncated, outcome.stderr_truncated
    )
    fields: dict[str, Any] = {"duration_ms": outcome.duration_ms}
    if outcome.status == "succeeded":
        kind = "succeeded"
        fields["exit_status"] = outcome.exit_status or 0
        fields["output"] = output if capture else None
    elif outcome.status == "aborted":
        kind = "aborted"
        fields["reason"] = outcome.reason
        fields["output"] = output if capture else None
    else:
        kind = "failed"
        fields["exit_status"] = outcome.exit_status
        fields["reason"] = outcome.reason
        fields["output"] = output  # a failure's output is always worth having
    if outcome.left_running:  # only then on the wire: an older server knows no such key
        fields["left_running"] = outcome.left_running
    return kind, fields


def shrink(output: m.JobOutput) -> m.JobOutput:
    """Half of each channel's tail, marked truncated where anything was cut."""
    out, err = output.stdout, output.stderr
    new_out, new_err = out[len(out) // 2 :], err[len(err) // 2 :]
    return m.JobOutput(
        new_out,
        new_err,
        output.stdout_truncated or len(new_out) < len(out),
        output.stderr_truncated or len(new_err) < len(err),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, m.JobOutput):
        return {
            "stdout": value.stdout,
            "stderr": value.stderr,
            "stdout_truncated": value.stdout_truncated,
            "stderr_truncated": value.stderr_truncated,
        }
    return value
