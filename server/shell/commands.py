"""Commands to nodes: a ``Send`` effect made a signed message on the node's command socket.

Theory of operation. A command is signed with the target node's session key (only that
node and this server hold it) and pushed, without blocking, to the socket of the node's
advertised endpoint under the node's CurveZMQ key. A node this server cannot reach yet (no
session, no endpoint, no key) is counted ``unsendable``: the job's deadlines, and the
re-send below, deal with it.

Re-sends. A heartbeat says what the node holds; a node whose vote is missing, or that is
ready but not running, never got its command or its answer was lost; a node holding a
commit its job no longer wants is told to abort. Only a heartbeat the node built well
after the last command for that job can say so: judged by the heartbeat's own timestamp,
not by when this server got round to reading it, or a server behind on its queue would
answer stale heartbeats with a flood of repeats and fall further behind. So each commit
and run is stamped when sent (``asked``), oldest first, and stamps are forgotten after a
minute. Aborts are stamped too: a node that keeps showing a stale commit is told again
only as often as any other repeat.

Secrets. A job's ``secret_env`` is kept sealed (``sealing.py``); it is opened here, into
the commit's ``RunOptions.secret_env``, and nowhere else. A value that does not open (a
log written by a server with another identity key) leaves the commit unsent, counted
``unsealable`` and logged by name: the node's vote times out rather than run without it.

Commands that cannot be sealed. A command that cannot be encoded or sealed (a commit
whose env outgrows the channel's frame limit, a value JSON cannot carry) is not sent:
counted ``oversized`` or ``unencodable``, logged once per job, and kept for the job's
owner to end that node with (``take_undeliverable``). It must never raise: the send runs
inside the server's loop, and the same job, read back after a restart, would raise again.

Killed at any line: the stamps are lost, so the first heartbeat after a restart may bring
one repeat; the agent answers repeats idempotently and never runs a job twice.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from pushjobs.errors import KeyFileError, OversizedFrame, PushJobsError
from pushjobs.protocol.framing import Limits, seal
from pushjobs.protocol.messages import Abort, Commit, Message, Ping, Run, RunOptions
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Signer
from server.core.effects import Send
from server.core.job import Job
from server.core.nodetable import NodeTable
from server.core.sealing import SECRET_ENV, SecretBox
from server.shell.channels import Channels

log = logging.getLogger("pushjobs.server")

ASKED_KEEP_MS = 60_000  # far past RESEND_AFTER_MS: a repeat is judged against this
RESEND_AFTER_MS = 2000  # a command unanswered this long after it was sent is sent again
TOO_LARGE = "commit too large for the command channel"
# Kept for the caller to drain; a cap so that a caller that never drains stays bounded.
MAX_UNDELIVERABLE = 10_000


class CommandSender:
    def __init__(
        self,
        outbox: Outbox,
        limits: Limits,
        channels: Channels,
        nodes: NodeTable,
        *,
        curve_of: Callable[[str], str | None],
        signer_of: Callable[[str], Signer | None],
        secrets: SecretBox | None = None,
    ) -> None:
        self.outbox = outbox
        # The outbox signs with the server's identity key: the key secrets are sealed by.
        self.secrets = secrets if secrets is not None else SecretBox.for_signer(outbox.signer)
        self.limits = limits
        self.channels = channels
        self.nodes = nodes
        self.curve_of = curve_of
        self.signer_of = signer_of
        self.asked: dict[tuple[str, str], int] = {}  # (job, node) -> wall ms of commit/run
        self.aborted: dict[tuple[str, str], int] = {}  # (job, node) -> wall ms of last abort
        self.counters: Counter[str] = Counter()
        self.undeliverable: dict[tuple[str, str], str] = {}  # see ``take_undeliverable``
        self.unsent_logged: dict[str, None] = {}  # jobs whose unsent command was logged

    def send(self, send: Send, job: Job | None, now_ms: int) -> None:
        info = self.nodes.get(send.node)
        curve = self.curve_of(send.node)
        signer = self.signer_of(send.node)
        # An abort needs no more than the job's id: it may be for a job long forgotten.
        needs_job = send.kind != "abort"
        if (needs_job and job is None) or info is None or curve is None or signer is None:
            self.counters["unsendable"] += 1
            return
        if not info.command_endpoint:
            self.counters["unsendable"] += 1
            return
        # A heartbeat built before this command arrived does not show it yet: no reason
        # to send it again for a while (see ``Coordinator.unreported``). Re-inserted, not
        # updated: the dicts stay oldest-first for ``forget``. Aborts apart: a commit
        # just sent must not delay the abort of a job that ended since.
        stamps = self.aborted if send.kind == "abort" else self.asked
        key = (send.job_id, send.node)
        stamps.pop(key, None)
        stamps[key] = now_ms
        try:
            message = self._message(send, job, now_ms)
            if message is None:
                return
            frames = seal(message, signer, self.limits)
        except (PushJobsError, ValueError, TypeError, OverflowError) as exc:
            self._unsealable(send, exc)
            return
        self.channels.send_command(info.command_endpoint, curve, frames)

    def flush(self, now_ms: int) -> None:
        """Send what ``send`` gathered: nothing here, every command left at once (the
        edges' sender gathers per job: ``edgecommands``)."""

    def _message(self, send: Send, job: Job | None, now_ms: int) -> Message | None:
        """The message ``send`` stands for; None when a commit's secrets do not open."""
        message: Message
        if send.kind == "commit" and job is not None:
            opts = job.options
            secret_env = self._open(job)
            if secret_env is None:
                return None
            options = RunOptions(
                timeout_s=job.run_timeout_ms / 1000,
                env=dict(opts.get("env") or {}),
                secret_env=secret_env,
                cwd=opts.get("cwd"),
                capture=bool(opts.get("capture", False)),
            )
            message = self.outbox.message(
                Commit,
                now_ms,
                node=send.node,
                job_id=job.job_id,
                command=job.command,
                options=options,
            )
        elif send.kind == "run":
            message = self.outbox.message(Run, now_ms, node=send.node, job_id=send.job_id)
        else:
            message = self.outbox.message(Abort, now_ms, node=send.node, job_id=send.job_id)
        return message

    def _unsealable(self, send: Send, exc: Exception) -> None:
        """``send`` could not be made a message: counted, logged once per job, and kept
        for the caller to end the node with (an abort needs no ending: it is one)."""
        oversized = isinstance(exc, OversizedFrame)
        self.counters["oversized" if oversized else "unencodable"] += 1
        why = TOO_LARGE if oversized else f"{send.kind} cannot be sent: {exc}"
        if send.job_id not in self.unsent_logged:
            if len(self.unsent_logged) >= MAX_UNDELIVERABLE:
                self.unsent_logged.pop(next(iter(self.unsent_logged)))
            self.unsent_logged[send.job_id] = None
            log.error(
                "job %s: %s to %s not sent: %s (%s)", send.job_id, send.kind, send.node, why, exc
            )
        if send.kind != "abort" and len(self.undeliverable) < MAX_UNDELIVERABLE:
            self.undeliverable.setdefault((send.job_id, send.node), why)

    def take_undeliverable(self) -> dict[tuple[str, str], str]:
        """(job, node) -> why, for each command that could not be sent since the last call:
        the node cannot take part in that job, and should be ended as failed."""
        out, self.undeliverable = self.undeliverable, {}
        return out

    def _open(self, job: Job) -> dict[str, str] | None:
        """The job's secret env in clear, or None (counted) when it cannot be opened."""
        sealed = job.options.get(SECRET_ENV) or {}
        if not sealed:
            return {}
        try:
            if self.secrets is None:
                raise KeyFileError("this server has no key to open secret_env with")
            return self.secrets.open_env(sealed)
        except KeyFileError as exc:
            self.counters["unsealable"] += 1
            log.error("job %s: commit not sent: %s", job.job_id, exc)
            return None

    # Outside a session: signed with the server's own key (the outbox's), for a node that
    # has no session (any more) that could sign it.

    def ping(self, node: str, endpoint: str, curve: str, now_ms: int) -> None:
        """Tell ``node`` to ask for a config again (its session is over)."""
        frames = self.outbox.frames(Ping, now_ms, node=node, rediscover=True)
        self.channels.send_command(endpoint, curve, frames)

    def abort_now(self, node: str, job_id: str, endpoint: str, curve: str, now_ms: int) -> None:
        """Abort ``job_id`` on a node about to be cut off (its key revoked)."""
        frames = self.outbox.frames(Abort, now_ms, node=node, job_id=job_id)
        self.channels.send_command(endpoint, curve, frames)

    def due_again(self, send: Send, beat_ms: int) -> bool:
        """Whether a heartbeat built at ``beat_ms`` that lacks ``send`` means it was lost."""
        stamps = self.aborted if send.kind == "abort" else self.asked
        last = stamps.get((send.job_id, send.node), -RESEND_AFTER_MS)
        return beat_ms - last >= RESEND_AFTER_MS

    def forget(self, before_ms: int) -> None:
        """Drop what was sent before ``before_ms``: O(dropped), not O(entries) per pass."""
        for stamps in (self.asked, self.aborted):
            stale = []
            for key, sent_ms in stamps.items():
                if sent_ms >= before_ms:
                    break
                stale.append(key)
            for key in stale:
                del stamps[key]
