"""Command intake: what the server tells this node, verified, then handed to the runner.

A command is obeyed only if, in this order:

1. it verifies (``Inbox``): signed by the server's Ed25519 key or by one of this node's
   HMAC session keys (the current one and the one before the last rotation, for
   commands in flight), fresh, and newer than anything seen from that server
   incarnation (a replay is dropped);
2. it names this node (dropped as ``other_node`` if not);
3. the server is online; while it is not, commands are discarded (``dropped_offline``).

Then each kind goes to the ``JobRunner``: a commit is judged (``judge``: the whitelist,
its captures and the env policy, see ``WhitelistFile.judge``) and checked against the
journal of jobs seen (one that cannot be read refuses it: ``agent.journalwrites``), and
held only if the runner took it (a nacked one never runs); a run whose outcome the
journal already holds (the server restarted and asks again) gets that outcome resent
instead; an abort is the runner's to decide; a ping asks for a
heartbeat now. The answer is a list of effects the daemon carries out in order: the
runner's actions plus ``Hold``, ``Resend``, ``BeatNow`` and ``Rediscover`` (the server no
longer accepts this node's session: ask for a config).

Killed at any line: the session keys and the replay window die with the process; the
restarted agent (a new incarnation) gets new keys from discovery, so commands signed for
the old session are refused. What must survive is in the journal, written by the daemon
(``Remember``) before the ack it guards is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.journal import Journal
from agent.journalwrites import JournalWrites
from agent.runner import Action, JobRunner, Reply
from agent.trust import trust_sessions
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import DEFAULT_LIMITS, KeyResolver, Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.signing import HmacVerifier, Verifier


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep this commit (its command and options) until its job ends."""

    commit: m.Commit


@dataclass(frozen=True, slots=True)
class Resend:
    """Queue again the outcome the journal stored for this job."""

    job_id: str
    kind: str
    body: bytes


@dataclass(frozen=True, slots=True)
class BeatNow:
    """Send a heartbeat at once (the server pinged)."""


@dataclass(frozen=True, slots=True)
class Rediscover:
    """Ask for a config again: the server said this node's session is over."""


Effect = Action | Hold | Resend | BeatNow | Rediscover


class CommandIntake:
    def __init__(
        self,
        name: str,
        server: KeyResolver,
        runner: JobRunner,
        journal: Journal,
        judge: Callable[[m.Commit], str | None],
        *,
        writes: JournalWrites | None = None,
    ) -> None:
        self.name = name
        self.runner = runner
        self.writes = writes if writes is not None else JournalWrites(journal)
        self.judge = judge
        self.session_keys: dict[str, Verifier] = {}
        self.resolve = trust_sessions(
            self.session_keys.get, server, "not a session key of this node: {!r}"
        )
        self.inbox = Inbox(self.resolve, 30.0)
        self.dropped_offline = 0

    def rekey(
        self,
        cfg: m.NodeConfig,
        secret: bytes,
        previous: str | None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        """Trust ``cfg``'s session key and the ``previous`` one only; a fresh replay window."""
        for kid in [kid for kid in self.session_keys if kid != previous]:
            del self.session_keys[kid]
        self.session_keys[cfg.session_key_id] = HmacVerifier(secret, owner=cfg.server_id)
        self.inbox = Inbox(self.resolve, cfg.max_skew_s, limits)

    def on_command(
        self, frames: list[bytes], now: float, now_ms: int, *, server_online: bool
    ) -> list[Effect]:
        received = self.inbox.accept(frames, now_ms)
        if received is None:
            return []
        cmd = received.message
        if getattr(cmd, "node", None) != self.name:
            self.inbox.drops["other_node"] += 1
            return []
        if not server_online:
            self.dropped_offline += 1
            return []
        match cmd:
            case m.Commit(job_id=job_id, command=command):
                seen, unreadable = self.writes.seen(job_id)
                actions = self.runner.commit(
                    job_id,
                    command,
                    refusal=self.judge(cmd) or unreadable,
                    seen=seen,
                    now=now,
                )
                taken = Reply("ack_commit", job_id) in actions
                held: list[Effect] = [Hold(cmd)] if taken else []
                return [*held, *actions]
            case m.Run(job_id=job_id):
                stored = self.writes.outcome(job_id)
                if stored is not None and self.runner.job_id != job_id:
                    return [Resend(job_id, *stored)]
                return list(self.runner.run(job_id))
            case m.Abort(job_id=job_id):
                return list(self.runner.abort(job_id))
            case m.Ping(rediscover=True):
                return [Rediscover()]
            case m.Ping():
                return [BeatNow()]
            case _:
                self.inbox.drops["unexpected"] += 1
                return []
