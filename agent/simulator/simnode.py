"""One simulated node: the agent's protocol behaviour without a process to run. Pure.

Theory of operation. A simulated node keeps what a real agent keeps: an incarnation, a
session outbox (sequence numbers and the HMAC session key from config discovery), the
agent's own ``JobRunner`` (one job at a time, a repeated command answered again without
acting twice) and a journal of job ids seen and outcomes stored. Instead of starting a
process it draws the outcome from ``Behaviour``: each commit is nacked with probability
``nack_rate``; each run ends after ``run_delay_s`` as a failure (``fail_rate``), a crash
(``crash_rate``: the node restarts with a new incarnation, as an agent killed mid-run
does), or a success.

The node answers with effects the simulator carries out: ``Later`` (a reply to send after a
delay), ``FinishAt`` (the simulated process ends), ``ExpireAt`` (the commit timeout) and
``Restart``. Randomness comes from the caller's ``random.Random``, time from the caller.

Heartbeats and replies are the hot path of a 100,000-node simulation sharing a small host
with the server it measures; both write the same bytes the codec and ``seal`` would (tests
hold them to that) without building a message object. A heartbeat changes only after its
sequence number, so ``configure`` precomputes, per session, the header, the body up to the
sequence and an HMAC state that has hashed both (``PrefixedHmac``); the fan-out formats the
timestamp and endpoint once per batch (``Stamp``); a heartbeat then costs one short
bytes format, one concatenation and the HMAC of its last hundred bytes.
"""

from __future__ import annotations

import hmac
import random
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from agent.runner import (
    REPLY_TYPES,
    Action,
    JobRunner,
    KillProcess,
    Remember,
    Reply,
    RunnerState,
    StartProcess,
)
from pushjobs.errors import OversizedFrame
from pushjobs.protocol import messages as m
from pushjobs.protocol.codec import encode_fields
from pushjobs.protocol.framing import header_for
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HMAC_SHA256, PrefixedHmac

IDLE: Final = RunnerState.IDLE
_IDLE_TAIL: Final = b',"job_id":null,"job_state":null}'


@dataclass(frozen=True, slots=True)
class Behaviour:
    commit_delay_s: float = 0.0
    run_delay_s: float = 0.0
    fail_rate: float = 0.0
    nack_rate: float = 0.0
    crash_rate: float = 0.0
    commit_timeout_s: float = 60.0

    def problems(self) -> list[str]:
        out = []
        for name in ("commit_delay_s", "run_delay_s", "commit_timeout_s"):
            if getattr(self, name) < 0:
                out.append(f"{name} must not be negative")
        for name in ("fail_rate", "nack_rate", "crash_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                out.append(f"{name} must be between 0 and 1")
        if self.fail_rate + self.crash_rate > 1.0:
            out.append("fail_rate + crash_rate must not exceed 1")
        return out


@dataclass(frozen=True, slots=True)
class Later:
    delay_s: float
    cls: type[m.Message]
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FinishAt:
    delay_s: float
    job_id: str


@dataclass(frozen=True, slots=True)
class ExpireAt:
    delay_s: float


@dataclass(frozen=True, slots=True)
class Restart:
    reason: str


Effect = Later | FinishAt | ExpireAt | Restart


@dataclass(frozen=True, slots=True)
class SessionSigner:
    """A node's session key as the outbox's ``Signer``.

    The node signs heartbeats and replies from ``PrefixedHmac`` states, so this keeps the
    key rather than a keyed HMAC (600 bytes a node: 60 MB for 100,000 nodes) and signs at
    the full price only what is sent another way."""

    key_id: str
    key: bytes
    method: str = HMAC_SHA256

    def sign(self, data: bytes) -> bytes:
        return hmac.digest(self.key, data, "sha256")


class Stamp:
    """The part of a heartbeat body after the sequence that every node of a batch shares.

    The body is the codec's: ``{"type":"node_heartbeat","sender":S,"incarnation":I,
    "sequence":N,"timestamp":T,"command_endpoint":E,"job_id":J,"job_state":K}`` (keys in
    the message's field order). Everything up to ``N`` is a node's for its session
    (``SimNode.configure``); ``T`` and ``E`` are the batch's, formatted here once; ``J``
    and ``K`` are null for an idle node, the same for all.
    """

    __slots__ = ("busy", "idle")

    def __init__(self, endpoint: str, now_ms: int) -> None:
        self.busy = b',"timestamp":%d,"command_endpoint":%b' % (now_ms, orjson.dumps(endpoint))
        self.idle = self.busy + _IDLE_TAIL


class SimNode:
    __slots__ = (
        "beat_mac",
        "beat_prefix",
        "busy_tail",
        "capture",
        "config_until",
        "edge",
        "header",
        "incarnation",
        "index",
        "key_ids",
        "link",
        "name",
        "outbox",
        "outcomes",
        "reply_mac",
        "run_started",
        "runner",
        "seen",
        "signer",
        "silent",
    )

    def __init__(self, index: int, name: str, commit_timeout_s: float = 60.0) -> None:
        self.index = index
        self.name = name
        self.incarnation = secrets.token_hex(8)
        self.outbox: Outbox | None = None
        self.signer: SessionSigner | None = None
        self.header = b""
        self.beat_prefix = b""
        self.beat_mac: PrefixedHmac | None = None
        self.reply_mac: PrefixedHmac | None = None
        self.busy_tail: tuple[str | None, RunnerState, bytes] = (None, IDLE, _IDLE_TAIL)
        self.runner = JobRunner(commit_timeout_s)
        self.seen: set[str] = set()  # the journal: job ids never to run again
        self.outcomes: dict[str, tuple[type[m.Message], dict[str, Any]]] = {}
        self.capture: dict[str, bool] = {}
        self.run_started: float = 0.0
        self.silent = False
        self.config_until = 0.0
        self.key_ids: list[str] = []  # session keys commands may be signed with
        # The socket its heartbeats and replies leave by when its config named a reply
        # endpoint of its own (a server with edges places nodes by name); None: the
        # fleet's shared one. Opaque here: this module does no I/O.
        self.link: Any = None
        # The heartbeat endpoint its config named (its edge's); "" once that edge is
        # lost and it asks again.
        self.edge = ""

    # --- session ------------------------------------------------------------------------

    def configure(self, key_id: str, key: bytes, lifetime_end: float) -> None:
        """Sign from now on with a session key from config discovery."""
        signer = SessionSigner(key_id, key)
        if self.outbox is None:
            self.outbox = Outbox(self.name, self.incarnation, signer)
        else:
            self.outbox.reseal(signer)
        self.signer = signer
        self.header = header = header_for(signer)
        # The heartbeat body up to its sequence number never changes within a session.
        self.beat_prefix = b'{"type":"node_heartbeat","sender":%b,"incarnation":%b,"sequence":' % (
            orjson.dumps(self.name),
            orjson.dumps(self.incarnation),
        )
        self.reply_mac = PrefixedHmac(key, header + b"\n")
        self.beat_mac = self.reply_mac.extended(self.beat_prefix)
        self.config_until = lifetime_end

    @property
    def configured(self) -> bool:
        return self.outbox is not None

    def restart(self) -> None:
        """A new process: new incarnation, no session, no job in hand; the journal stays."""
        self.incarnation = secrets.token_hex(8)
        self.outbox = None
        self.signer = None
        self.header = b""
        self.beat_prefix = b""
        self.beat_mac = self.reply_mac = None
        self.runner = JobRunner(self.runner.commit_timeout_s)
        self.capture.clear()

    def heartbeat_frames(self, endpoint: str, now_ms: int) -> list[bytes]:
        """The next heartbeat's three frames (``FanOut`` calls ``beat`` with a shared stamp)."""
        return list(self.beat(Stamp(endpoint, now_ms)))

    def beat(self, stamp: Stamp) -> tuple[bytes, bytes, bytes]:
        """Header, body and signature of the next heartbeat. Configured nodes only."""
        out, mac = self.outbox, self.beat_mac
        assert out is not None and mac is not None
        out.sequence = sequence = out.sequence + 1
        runner = self.runner
        if runner.state is IDLE:
            rest = b"%d%b" % (sequence, stamp.idle)
        else:
            rest = b"%d%b%b" % (sequence, stamp.busy, self._busy_tail(runner))
        return self.header, self.beat_prefix + rest, mac.tag(rest)

    def _busy_tail(self, runner: JobRunner) -> bytes:
        # A busy node beats many times with the same job and state: format them once.
        job_id, state, tail = self.busy_tail
        if job_id != runner.job_id or state is not runner.state:
            job_id, state = runner.job_id, runner.state
            tail = b',"job_id":%b,"job_state":%b}' % (
                orjson.dumps(job_id),
                orjson.dumps(state.value),
            )
            self.busy_tail = (job_id, state, tail)
        return tail

    def reply_frames(
        self, cls: type[m.Message], now_ms: int, fields: Mapping[str, Any]
    ) -> tuple[bytes, bytes, bytes]:
        """What ``outbox.frames(cls, now_ms, **fields)`` would return, for less.

        OversizedFrame for a body the server would drop, as ``seal`` raises."""
        out, mac = self.outbox, self.reply_mac
        assert out is not None and mac is not None
        out.sequence = sequence = out.sequence + 1
        body = encode_fields(
            cls,
            fields,
            sender=self.name,
            incarnation=self.incarnation,
            sequence=sequence,
            timestamp=now_ms,
        )
        if len(body) > out.limits.max_body_bytes:
            raise OversizedFrame(f"body of {len(body)} bytes exceeds {out.limits.max_body_bytes}")
        return self.header, body, mac.tag(body)

    # --- commands -----------------------------------------------------------------------

    def on_commit(
        self, cmd: m.Commit, rng: random.Random, how: Behaviour, now: float
    ) -> list[Effect]:
        whitelisted = rng.random() >= how.nack_rate
        actions = self.runner.commit(
            cmd.job_id, cmd.command, whitelisted=whitelisted, seen=cmd.job_id in self.seen, now=now
        )
        if self.runner.job_id == cmd.job_id:
            self.capture[cmd.job_id] = cmd.options.capture
        out = self._effects(actions, how.commit_delay_s)
        if self.runner.state is RunnerState.COMMITTED:
            out.append(ExpireAt(how.commit_timeout_s))
        return out

    def on_run(self, cmd: m.Run, how: Behaviour, now: float) -> list[Effect]:
        stored = self.outcomes.get(cmd.job_id)
        if stored is not None and self.runner.job_id != cmd.job_id:
            return [Later(0.0, stored[0], dict(stored[1]))]
        actions = self.runner.run(cmd.job_id)
        if any(isinstance(a, StartProcess) for a in actions):
            self.run_started = now
        return self._effects(actions, 0.0, run_delay_s=how.run_delay_s)

    def on_abort(self, cmd: m.Abort, now: float) -> list[Effect]:
        actions = self.runner.abort(cmd.job_id)
        out = self._effects(actions, 0.0)
        if any(isinstance(a, KillProcess) for a in actions):
            self.runner.finished(cmd.job_id)
            out.append(self._outcome(m.Aborted, cmd.job_id, now, reason="abort requested"))
        return out

    def expire(self, now: float) -> list[Effect]:
        return self._effects(self.runner.tick(now), 0.0)

    def finish(self, job_id: str, rng: random.Random, how: Behaviour, now: float) -> list[Effect]:
        """The simulated process of ``job_id`` ends now."""
        if self.runner.job_id != job_id or self.runner.state is not RunnerState.RUNNING:
            return []  # aborted meanwhile, or the node restarted
        draw = rng.random()
        if draw < how.crash_rate:
            return [Restart("simulated crash")]
        self.runner.finished(job_id)
        if draw < how.crash_rate + how.fail_rate:
            failure = m.JobOutput(stderr="simulated failure\n")
            return [
                self._outcome(m.Failed, job_id, now, exit_status=1, reason="exit 1", output=failure)
            ]
        output = m.JobOutput() if self.capture.get(job_id) else None
        return [self._outcome(m.Succeeded, job_id, now, exit_status=0, output=output)]

    # --- internals ----------------------------------------------------------------------

    def _outcome(self, cls: type[m.Message], job_id: str, now: float, **fields: Any) -> Later:
        fields["job_id"] = job_id
        fields["duration_ms"] = max(0, round((now - self.run_started) * 1000))
        self.outcomes[job_id] = (cls, fields)
        self.capture.pop(job_id, None)
        return Later(0.0, cls, dict(fields))

    def _effects(
        self, actions: Iterable[Action], delay_s: float, *, run_delay_s: float = 0.0
    ) -> list[Effect]:
        out: list[Effect] = []
        for action in actions:
            match action:
                case Remember(job_id=job_id):
                    self.seen.add(job_id)
                case Reply(kind=kind):
                    out.append(Later(delay_s, REPLY_TYPES[kind], action.fields()))
                case StartProcess(job_id=job_id):
                    out.append(FinishAt(run_delay_s, job_id))
                case KillProcess():
                    pass  # on_abort reports the outcome itself
        return out
