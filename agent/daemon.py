"""``pushjobs-agent``: the node agent's loop around the pure runner, the executor and the link.

Theory of operation. One thread and one poller: the server's heartbeats (SUB), the
agent's own command socket (PULL, a CurveZMQ server that admits only the server's key)
and a wake-up pipe (job outcomes from the executor's watcher thread, and signals). Each
turn handles what arrived, then time:

- discovery when there is no config yet, when its lifetime ends (not while a job runs),
  after a random splay when the server shows a new incarnation, and after a long silence;
  attempts back off with jitter and go round every configured server;
- the server's liveness, with the same tracker the server uses for nodes: while it is
  offline the agent sends nothing and discards commands;
- its own heartbeat every interval, dropped rather than queued if it cannot leave now;
- replies (acks, results) queued until they can be sent, never dropped; each outcome is
  also kept in the journal, and sent again after every discovery, so a result survives a
  server restart (the new server knows only the new session key).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import queue
import random
import secrets
import signal
import socket
import sys
import time
from base64 import b64decode
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import zmq

from agent import whitelist as wl
from agent.config import AgentConfig
from agent.discovery import Discovery, backoff_s, server_resolver, session_key
from agent.executor import Execution, Outcome
from agent.journal import Journal
from agent.link import ServerLink
from agent.runner import REPLY_TYPES, Action, JobRunner, KillProcess, Remember, Reply, StartProcess
from keys import files
from keys.fingerprint import key_id
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, ExecutionError, OversizedFrame, PushJobsError, UnknownKey
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import (
    HMAC_SHA256,
    Ed25519Signer,
    HmacSigner,
    HmacVerifier,
    Verifier,
)
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain

log = logging.getLogger("pushjobs.agent")

SERVER = "server"
REPLY_HWM = 16
MAX_QUEUED_REPLIES = 10_000
RESEND_OUTCOME_WITHIN_MS = 3600_000
MAX_WAIT_S = 1.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Agent:
    def __init__(self, config: AgentConfig, *, out: Any = None) -> None:
        self.config = config
        self.out = out if out is not None else sys.stdout
        section = config.agent
        self.name = section.name
        self.identity = files.load_private(section.key_path())
        if self.identity.name != self.name or self.identity.public.kind != "node":
            raise ConfigError(
                f"{section.key_path()} holds the {self.identity.public.kind} key "
                f"{self.identity.name!r}, not the node key of {self.name!r}",
                key="agent.key_file",
            )
        assert section.server_key is not None  # checked by the config
        self.server = files.load_public(section.server_key)
        self.incarnation = secrets.token_hex(8)
        node_signer = Ed25519Signer(
            key_id(self.identity.public.ed25519_public), self.identity.signing_key()
        )
        self.transport = Transport()
        self.discovery = Discovery(
            self.transport,
            self.identity,
            self.server,
            Outbox(self.name, self.incarnation, node_signer),
        )
        server_kid, verifier = server_resolver(self.server)

        def resolve(method: str, key_id: str) -> Verifier:
            if key_id != server_kid:
                raise UnknownKey(f"not the server's key: {key_id[:32]!r}")
            return verifier

        self._resolve = resolve
        # Commands are signed with this node's session key (current or the one before a
        # rotation); heartbeats and config replies with the server's Ed25519 key.
        self.command_keys: dict[str, Verifier] = {}

        def resolve_command(method: str, key_id: str) -> Verifier:
            if method == HMAC_SHA256:
                verifier = self.command_keys.get(key_id)
                if verifier is None:
                    raise UnknownKey(f"not a session key of this node: {key_id[:32]!r}")
                return verifier
            return resolve(method, key_id)

        self._resolve_command = resolve_command
        # One inbox per channel: the server's sequence is shared by all its sockets, so
        # heartbeats and commands may interleave out of order across channels.
        self.beat_inbox = Inbox(resolve, 30.0)
        self.cmd_inbox = Inbox(resolve_command, 30.0)
        self.command = self.transport.socket(
            "pull",
            bind=section.command_bind,
            hwm=1000,
            curve_server=CurveKeys(self.identity.public.curve_public, self.identity.curve_secret),
            allowed_clients=lambda key: key == self.server.curve_public,
        )
        self.command_endpoint = section.command_endpoint or bound_endpoint(self.command)
        state = section.state_path()
        self.journal = Journal(state / "journal.db")
        self.runner = JobRunner(section.commit_timeout_s)
        self.whitelist_path = section.whitelist_path()
        self.whitelist = wl.Whitelist()
        self._whitelist_stamp: tuple[int, int] | None = None
        self.reload_whitelist(quiet_missing=False)
        facts = {"os": platform.system().lower(), "hostname": socket.gethostname()}
        facts.update(config.facts)
        self.facts = facts
        self.tags = tuple(section.tags)

        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()

        self.node_config: m.NodeConfig | None = None
        self.session: Outbox | None = None
        self.link = ServerLink(
            self.transport,
            CurveKeys(self.identity.public.curve_public, self.identity.curve_secret),
            self.server.curve_public,
            REPLY_HWM,
        )
        self.sub: zmq.Socket[bytes] | None = None
        self.push: zmq.Socket[bytes] | None = None
        self.liveness: LivenessTracker | None = None
        self.limits = Limits()
        self.queued: deque[tuple[type[m.Message], dict[str, Any]]] = deque()
        self.commits: dict[str, m.Commit] = {}
        self.execution: Execution | None = None
        self.stopping = False
        self.reload_requested = False
        self.discovery_due: float | None = time.monotonic()
        self.discovery_attempt = 0
        self.last_status = ""
        self.lifetime_end: float | None = None
        self.last_beat_from_server = time.monotonic()
        self.next_beat = time.monotonic()
        self.dropped_commands = 0

    # --- whitelist ----------------------------------------------------------------------------

    def reload_whitelist(self, *, quiet_missing: bool = True, force: bool = False) -> None:
        try:
            st = os.stat(self.whitelist_path)
        except FileNotFoundError:
            if self._whitelist_stamp is not None or not quiet_missing:
                log.warning("no whitelist at %s: every command is refused", self.whitelist_path)
            self.whitelist, self._whitelist_stamp = wl.Whitelist(), None
            return
        except OSError as exc:
            log.error("cannot read the whitelist %s: %s", self.whitelist_path, exc)
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._whitelist_stamp and not force:
            return
        self._whitelist_stamp = stamp
        try:
            self.whitelist = wl.load(self.whitelist_path)
        except ConfigError as exc:
            log.error("whitelist not reloaded, keeping the previous one: %s", exc)
            return
        log.info("whitelist loaded: %s", ", ".join(self.whitelist.names()) or "(empty)")

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        self.out.write(f"pushjobs-agent {self.name} ready command={self.command_endpoint}\n")
        self.out.flush()
        while not self.stopping:
            poller = zmq.Poller()
            poller.register(self.command, zmq.POLLIN)
            poller.register(self.wake_r, zmq.POLLIN)
            if self.sub is not None:
                poller.register(self.sub, zmq.POLLIN)
            ready = dict(poller.poll(round(self._wait_s() * 1000)))
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
            if self.sub is not None and self.sub in ready:
                self._on_server_beats(drain(self.sub, 256))
            if self.command in ready:
                for frames in drain(self.command, 256):
                    self._on_command(frames)
            self._on_outcomes()
            if self.reload_requested:
                self.reload_requested = False
                self.reload_whitelist(force=True)
            self._timers()
            self._flush()
        self._shutdown()

    def _wait_s(self) -> float:
        now = time.monotonic()
        due = [now + MAX_WAIT_S, self.next_beat]
        if self.discovery_due is not None:
            due.append(self.discovery_due)
        if self.liveness is not None and (d := self.liveness.next_deadline()) is not None:
            due.append(d)
        return max(0.0, min(due) - now)

    @property
    def server_online(self) -> bool:
        return self.liveness is not None and self.liveness.is_online(SERVER)

    def _timers(self) -> None:
        now = time.monotonic()
        self.reload_whitelist()
        for action in self.runner.tick(now):
            self._act(action)
        if self.liveness is not None:
            for gone in self.liveness.expire(now):
                log.warning("server offline (no heartbeat since %.1f s)", now - gone.last_seen)
        cfg = self.node_config
        if cfg is not None:
            silence = now - self.last_beat_from_server
            window = cfg.interval_s * cfg.offline_threshold
            long_silence = silence > self.config.discovery.silence_factor * window
            expired = self.lifetime_end is not None and now >= self.lifetime_end
            if self.discovery_due is None and (
                long_silence or (expired and (not self.runner.busy or not self.server_online))
            ):
                log.info("rediscovering: %s", "server silent" if long_silence else "config expired")
                self.discovery_due = now
        if self.discovery_due is not None and now >= self.discovery_due:
            self._discover(now)
        if now >= self.next_beat:
            self._heartbeat()

    # --- discovery ----------------------------------------------------------------------------

    def _discover(self, now: float) -> None:
        servers = self.config.agent.servers
        endpoint = servers[self.discovery_attempt % len(servers)]
        self.discovery_attempt += 1
        disc = self.config.discovery
        reply = self.discovery.attempt(
            endpoint, self.command_endpoint, self.facts, self.tags, disc.attempt_timeout_s
        )
        if reply is None:
            status = f"no answer from {endpoint}"
        elif reply.status != "accepted" or reply.config is None:
            status = f"{endpoint}: {reply.status}: {reply.message}"
        else:
            self._apply(reply.config, endpoint)
            return
        if status != self.last_status:
            log.warning("config discovery: %s; retrying with backoff", status)
            self.last_status = status
        wait = backoff_s(self.discovery_attempt, disc.backoff_min_s, disc.backoff_max_s)
        self.discovery_due = time.monotonic() + wait

    def _apply(self, cfg: m.NodeConfig, endpoint: str) -> None:
        now = time.monotonic()
        old = self.node_config
        self.node_config = cfg
        self.discovery_due = None
        self.discovery_attempt = 0
        self.last_status = ""
        self.lifetime_end = now + cfg.lifetime_s
        self.limits = Limits(max_body_bytes=cfg.max_body_bytes)
        secret = session_key(cfg.session_key_b64)
        signer = HmacSigner(cfg.session_key_id, secret)
        previous = self.session.signer.key_id if self.session is not None else None
        self.command_keys = {kid: v for kid, v in self.command_keys.items() if kid == previous}
        self.command_keys[cfg.session_key_id] = HmacVerifier(secret, owner=cfg.server_id)
        if self.session is None:
            self.session = Outbox(self.name, self.incarnation, signer, self.limits)
        else:
            self.session.reseal(signer)
            self.session.limits = self.limits
        self.beat_inbox = Inbox(self._resolve, cfg.max_skew_s)
        self.cmd_inbox = Inbox(self._resolve_command, cfg.max_skew_s, self.limits)
        self.link.follow(old, cfg)
        self.sub, self.push = self.link.sub, self.link.push
        self.liveness = LivenessTracker(cfg.interval_s, cfg.offline_threshold, cfg.online_threshold)
        # The signed answer is proof the server is alive: online at once.
        for _ in range(cfg.online_threshold):
            self.liveness.heartbeat(SERVER, now)
        self.last_beat_from_server = now
        log.info(
            "config from %s (server incarnation %s, interval %g s)",
            endpoint,
            cfg.server_incarnation,
            cfg.interval_s,
        )
        last = self.journal.last_outcome(now_ms() - RESEND_OUTCOME_WITHIN_MS)
        if last is not None:
            self._queue_stored(*last)
        self.next_beat = now

    # --- server heartbeats ----------------------------------------------------------------------

    def _on_server_beats(self, batch: list[list[bytes]]) -> None:
        now = time.monotonic()
        for frames in batch:
            received = self.beat_inbox.accept(frames, now_ms())
            if received is None or not isinstance(received.message, m.ServerHeartbeat):
                continue
            beat = received.message
            if self.liveness is None or self.node_config is None:
                continue
            self.last_beat_from_server = now
            if self.liveness.heartbeat(SERVER, now) is not None:
                log.info("server online")
            if beat.incarnation != self.node_config.server_incarnation and (
                self.discovery_due is None
            ):
                splay = random.uniform(0, self.config.discovery.splay_s)
                log.info("server restarted (incarnation %s): rediscovering", beat.incarnation)
                self.discovery_due = now + splay

    # --- commands -------------------------------------------------------------------------------

    def _on_command(self, frames: list[bytes]) -> None:
        received = self.cmd_inbox.accept(frames, now_ms())
        if received is None:
            return
        cmd = received.message
        if getattr(cmd, "node", None) != self.name:
            self.cmd_inbox.drops["other_node"] += 1
            return
        if not self.server_online:
            self.dropped_commands += 1
            return
        match cmd:
            case m.Commit(job_id=job_id, command=command):
                self.commits[job_id] = cmd
                actions = self.runner.commit(
                    job_id,
                    command,
                    whitelisted=self.whitelist.resolve(command) is not None,
                    seen=self.journal.seen(job_id),
                    now=time.monotonic(),
                )
            case m.Run(job_id=job_id):
                stored = self.journal.outcome(job_id)
                if stored is not None and self.runner.job_id != job_id:
                    self._queue_stored(job_id, *stored)
                    return
                actions = self.runner.run(job_id)
            case m.Abort(job_id=job_id):
                actions = self.runner.abort(job_id)
            case m.Ping():
                self.next_beat = time.monotonic()
                return
            case _:
                self.cmd_inbox.drops["unexpected"] += 1
                return
        for action in actions:
            self._act(action)

    def _act(self, action: Action) -> None:
        match action:
            case Remember(job_id=job_id):
                self.journal.remember(job_id, now_ms())
            case Reply(kind=kind, job_id=job_id):
                if kind == "aborted":
                    self.commits.pop(job_id, None)
                self._queue(REPLY_TYPES[kind], action.fields())
            case StartProcess(job_id=job_id):
                self._start(job_id)
            case KillProcess(job_id=job_id, reason=reason):
                if self.execution is not None and self.execution.job_id == job_id:
                    self.execution.abort(reason)

    def _start(self, job_id: str) -> None:
        commit = self.commits.get(job_id)
        argv = self.whitelist.resolve(commit.command) if commit is not None else None
        if commit is None or argv is None:
            self.runner.start_failed(job_id)
            self._finish_fields(
                job_id,
                "failed",
                {
                    "exit_status": None,
                    "reason": "command no longer whitelisted",
                    "duration_ms": 0,
                },
            )
            return
        opts = commit.options
        env = dict(os.environ)
        env.update(opts.env)
        env["PUSHJOBS_JOB_ID"] = job_id
        env["PUSHJOBS_NODE"] = self.name
        try:
            if opts.file is not None:
                _write_payload(opts.file)
            self.execution = Execution(
                job_id,
                argv,
                timeout_s=opts.timeout_s,
                on_done=self._done_from_thread,
                env=env,
                cwd=opts.cwd,
                user=opts.user,
                capture_bytes=self.config.agent.capture_bytes,
            )
        except (ExecutionError, OSError) as exc:
            self.runner.start_failed(job_id)
            self._finish_fields(
                job_id, "failed", {"exit_status": None, "reason": str(exc), "duration_ms": 0}
            )
            return
        log.info("job %s: started %s (pid %d)", job_id, commit.command, self.execution.pid)
        self._queue(m.Started, {"job_id": job_id, "pid": self.execution.pid})

    def _done_from_thread(self, outcome: Outcome) -> None:
        self.outcomes.put(outcome)
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"o")

    def _on_outcomes(self) -> None:
        while True:
            try:
                outcome = self.outcomes.get_nowait()
            except queue.Empty:
                return
            self.runner.finished(outcome.job_id)
            if self.execution is not None and self.execution.job_id == outcome.job_id:
                self.execution = None
            commit = self.commits.pop(outcome.job_id, None)
            capture = commit is not None and commit.options.capture
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
            log.info("job %s: %s %s", outcome.job_id, kind, outcome.reason)
            self._finish_fields(outcome.job_id, kind, fields)

    def _finish_fields(self, job_id: str, kind: str, fields: dict[str, Any]) -> None:
        fields = {"job_id": job_id, **fields}
        body = orjson.dumps({k: _plain(v) for k, v in fields.items()})
        self.journal.store_outcome(job_id, kind, body, now_ms())
        self._queue(REPLY_TYPES[kind], fields)

    def _queue_stored(self, job_id: str, kind: str, body: bytes) -> None:
        fields = orjson.loads(body)
        if isinstance(fields.get("output"), dict):
            fields["output"] = m.JobOutput(**fields["output"])
        fields["job_id"] = job_id
        self._queue(REPLY_TYPES[kind], fields)

    # --- sending --------------------------------------------------------------------------------

    def _queue(self, cls: type[m.Message], fields: dict[str, Any]) -> None:
        if len(self.queued) >= MAX_QUEUED_REPLIES:
            log.error("reply queue full; dropping the oldest reply")
            self.queued.popleft()
        self.queued.append((cls, fields))

    def _flush(self) -> None:
        if self.push is None or self.session is None or not self.server_online:
            return
        while self.queued:
            cls, fields = self.queued[0]
            frames = self._seal(cls, fields)
            if frames is None:
                self.queued.popleft()
                continue
            try:
                self.push.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                return  # the queue to the server is full: try again next turn
            self.queued.popleft()

    def _seal(self, cls: type[m.Message], fields: dict[str, Any]) -> list[bytes] | None:
        assert self.session is not None
        for _ in range(24):
            try:
                return self.session.frames(cls, now_ms(), **fields)
            except OversizedFrame:
                output = fields.get("output")
                if not isinstance(output, m.JobOutput):
                    break
                fields = {**fields, "output": _shrink(output)}
        log.error("cannot fit a %s reply into the size limit; dropped", cls.TYPE)
        return None

    def _heartbeat(self) -> None:
        interval = self.node_config.interval_s if self.node_config else 1.0
        self.next_beat = time.monotonic() + interval
        if self.push is None or self.session is None or not self.server_online:
            return
        frames = self.session.frames(
            m.NodeHeartbeat,
            now_ms(),
            command_endpoint=self.command_endpoint,
            job_id=self.runner.job_id,
            job_state=self.runner.state.value if self.runner.busy else None,
        )
        with contextlib.suppress(zmq.Again):  # a queued heartbeat is worthless
            self.push.send_multipart(frames, zmq.NOBLOCK)

    # --- stopping -------------------------------------------------------------------------------

    def _shutdown(self) -> None:
        if self.execution is not None:
            log.info("stopping: aborting job %s", self.execution.job_id)
            self.execution.abort("agent stopping")
            self.execution.join(5.0)
            self._on_outcomes()
            self._flush()
        self.transport.close()
        self.journal.close()
        os.close(self.wake_r)
        os.close(self.wake_w)


def _plain(value: Any) -> Any:
    if isinstance(value, m.JobOutput):
        return {
            "stdout": value.stdout,
            "stderr": value.stderr,
            "stdout_truncated": value.stdout_truncated,
            "stderr_truncated": value.stderr_truncated,
        }
    return value


def _shrink(output: m.JobOutput) -> m.JobOutput:
    """Half of each channel's tail, marked truncated where anything was cut."""
    out, err = output.stdout, output.stderr
    new_out, new_err = out[len(out) // 2 :], err[len(err) // 2 :]
    return m.JobOutput(
        new_out,
        new_err,
        output.stdout_truncated or len(new_out) < len(out),
        output.stderr_truncated or len(new_err) < len(err),
    )


def _write_payload(payload: m.FilePayload) -> None:
    data = b64decode(payload.content_b64, validate=True)
    path = Path(payload.path)
    tmp = path.with_name(path.name + ".pushjobs-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, payload.mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, payload.mode)
    os.replace(tmp, path)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pushjobs-agent",
        description="The pushjobs node agent: heartbeats, and whitelisted jobs from the server.",
        epilog="Example: pushjobs-agent --config /etc/pushjobs/agent.toml",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("PUSHJOBS_AGENT_CONFIG") or None,
        help="agent TOML file (default: $PUSHJOBS_AGENT_CONFIG)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    try:
        config = load_config(AgentConfig, args.config, env_prefix="PUSHJOBS_AGENT_")
        name = config.agent.name or "?"
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format=f"%(asctime)s pushjobs-agent {name}: %(message)s",
            stream=sys.stderr,
        )
        agent = Agent(config)
    except PushJobsError as exc:
        sys.stderr.write(f"pushjobs-agent: error: {exc}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None

    def stop(signum: int, frame: object) -> None:
        agent.stopping = True

    def hup(signum: int, frame: object) -> None:
        agent.reload_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hup)
    signal.set_wakeup_fd(agent.wake_w)  # a signal wakes the poller at once
    agent.run()
    log.info("stopped")
    raise SystemExit(0)


if __name__ == "__main__":
    main()
