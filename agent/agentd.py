"""``pushjobs-agent``: the node agent's loop, wiring its components together.

Theory of operation. One thread and one poller: the server's heartbeats (SUB), the
agent's own command socket (PULL, a CurveZMQ server that admits only the server's key)
and a wake-up pipe (job outcomes from the executor's watcher thread, and signals). Each
turn is the same story: poll until the next deadline, hand each input to the component
that owns it, run the timers that fell due, flush what is queued.

- ``Upstream`` (agent.upstream): the server's config, sockets and liveness, and config
  discovery when it falls due;
- ``CommandIntake`` (agent.intake): commands verified, then judged by the ``JobRunner``;
- ``Launcher`` (agent.launcher): the job's process and its outcome;
- ``Outbound`` (agent.outbound): replies, heartbeats and outcomes to the server;
- ``JournalWrites`` (agent.journalwrites): journal writes that never stop the agent (a
  full or read-only state directory nacks new jobs; a running one finishes and reports);
- ``WhitelistFile`` (agent.whitelist_file): the whitelist in force.

Each says in its own docstring what a kill at any line leaves behind; the daemon itself
holds only the stop and reload flags set by signals.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sys
from typing import Any

import zmq

from agent.agentconfig import AgentConfig
from agent.cgroups import Containment
from agent.discovery import session_key
from agent.intake import BeatNow, CommandIntake, Effect, Hold, Rediscover, Resend
from agent.journal import Journal
from agent.journalwrites import JournalWrites
from agent.launcher import Launcher
from agent.leftovers import kill_if_same, start_time
from agent.outbound import Outbound, outcome_reply
from agent.reaper import Reaper
from agent.runner import REPLY_TYPES, JobRunner, KillProcess, Remember, Reply, StartProcess
from agent.trust import trust_server
from agent.upstream import Upstream
from agent.whitelist_file import WhitelistFile
from keys import files
from pushjobs.clock import Clock, SystemClock
from pushjobs.errors import ConfigError, ExecutionError
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import MAX_BODY_CEILING, Limits
from pushjobs.protocol.signing import HmacSigner
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain

log = logging.getLogger("pushjobs.agent")

RESEND_OUTCOME_WITHIN_MS = 3600_000
MAX_WAIT_S = 1.0
STOP_GRACE_S = 5.0


def now_ms() -> int:
    return SystemClock().wall_ms()


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        out: Any = None,
        clock: Clock | None = None,
        reaper: Reaper | None = None,
        adopter: int | None = None,
    ) -> None:
        self.config = config
        self.out = out if out is not None else sys.stdout
        self.clock = clock if clock is not None else SystemClock()
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
        # Commands are as large as the server's configured body limit, unknown until
        # discovery; only the server's key passes the ZAP check of the command socket.
        self.transport = Transport(max_message_bytes=MAX_BODY_CEILING + 4096)
        self.command = self.transport.socket(
            "pull",
            bind=section.command_bind,
            hwm=1000,
            curve_server=CurveKeys(self.identity.public.curve_public, self.identity.curve_secret),
            allowed_clients=lambda key: key == self.server.curve_public,
        )
        self.command_endpoint = section.command_endpoint or bound_endpoint(self.command)
        self.upstream = Upstream(
            config,
            self.transport,
            self.identity,
            self.server,
            incarnation=self.incarnation,
            command_endpoint=self.command_endpoint,
            clock=self.clock,
        )
        now = self.clock.monotonic()
        # A full or read-only state directory is waited for (agent.journalwrites).
        self.journal = Journal(section.state_path() / "journal.db", wait=True)
        self.writes = JournalWrites(self.journal)
        self.leftovers_ended = False
        self.runner = JobRunner(section.commit_timeout_s)
        self.whitelist = WhitelistFile(section.whitelist_path(), config.env.policy())
        self.intake = CommandIntake(
            self.name,
            trust_server(self.server),
            self.runner,
            self.journal,
            self.whitelist.judge,
            writes=self.writes,
        )
        self.outbound = Outbound(
            self.name,
            self.incarnation,
            self.command_endpoint,
            self.journal,
            next_beat=now,
            writes=self.writes,
        )
        self._end_leftovers()  # before any work: a node runs one job at a time
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.reaper = reaper
        tag = reaper.tag if reaper is not None else secrets.token_hex(8)
        self.containment = Containment.probe(tag, section.job_containment)
        if section.job_containment == "cgroup" and self.containment.mode != "cgroup":
            raise ConfigError(
                f'job_containment is "cgroup" but {self.containment.reason}',
                key="agent.job_containment",
            )
        if self.containment.mode == "cgroup":
            log.info("each job runs in a cgroup of its own under %s", self.containment.base)
        else:
            log.info(
                "jobs are tracked by ancestry and marks, not cgroups: %s%s",
                self.containment.reason,
                "" if adopter is not None else " (and orphans go to init: not a subreaper)",
            )
        self.launcher = Launcher(
            self.name,
            section.capture_bytes,
            self._wake,
            reaper,
            judge=self.whitelist.judge,
            containment=self.containment,
            adopter=adopter,
        )
        self.stopping = False
        self.reload_requested = False

    # --- the loop: one turn ---------------------------------------------------------------

    def run(self) -> None:
        self.out.write(f"pushjobs-agent {self.name} ready command={self.command_endpoint}\n")
        self.out.flush()
        while not self.stopping:
            ready = self._poll(self._wait_s())
            if self.wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
            if (sub := self.upstream.link.sub) is not None and sub in ready:
                self.upstream.on_beats(drain(sub, 256))
            if self.command in ready:
                for frames in drain(self.command, 256):
                    self._on_command(frames)
            self._on_outcomes()
            if self.reload_requested:
                self.reload_requested = False
                self.whitelist.refresh(force=True)
            self._timers()
            self._flush()
        self.shutdown()

    def _poll(self, wait_s: float) -> dict[Any, int]:
        poller = zmq.Poller()
        poller.register(self.command, zmq.POLLIN)
        poller.register(self.wake_r, zmq.POLLIN)
        if self.upstream.link.sub is not None:
            poller.register(self.upstream.link.sub, zmq.POLLIN)
        return dict(poller.poll(round(wait_s * 1000)))

    def _wait_s(self) -> float:
        """Until the next deadline: a heartbeat, discovery, the server going offline."""
        now = self.clock.monotonic()
        due = [now + MAX_WAIT_S, self.outbound.next_beat]
        if (deadline := self.upstream.next_deadline()) is not None:
            due.append(deadline)
        return max(0.0, min(due) - now)

    def _on_command(self, frames: list[bytes]) -> None:
        now, online = self.clock.monotonic(), self.upstream.online
        for effect in self.intake.on_command(
            frames, now, self.clock.wall_ms(), server_online=online
        ):
            if isinstance(effect, Remember):
                if not self._remember(effect.job_id):
                    return  # nacked instead: the ack that followed must not be sent
                continue
            self._act(effect)

    def _on_outcomes(self) -> None:
        for outcome, commit in self.launcher.ended():
            self.runner.finished(outcome.job_id)
            capture = commit is not None and commit.options.capture
            kind, fields = outcome_reply(outcome, capture)
            log.info("job %s: %s %s", outcome.job_id, kind, outcome.reason)
            for left in outcome.left_running:
                log.warning(
                    "job %s: a process of the job could not be killed: %s", outcome.job_id, left
                )
            self.outbound.outcome(outcome.job_id, kind, fields, self.clock.wall_ms())
            self.writes.ended(outcome.job_id)

    def _timers(self) -> None:
        now = self.clock.monotonic()
        self.whitelist.refresh()
        for action in self.runner.tick(now):
            self._act(action)
        accepted = self.upstream.tick(now, busy=self.runner.busy)
        if accepted is not None:
            self.apply_config(*accepted)
        if self.outbound.beat_due(now):
            job_state = self.runner.state.value if self.runner.busy else None
            self.outbound.heartbeat(
                self.upstream.push,
                now,
                self.clock.wall_ms(),
                job_id=self.runner.job_id,
                job_state=job_state,
            )

    def _flush(self) -> None:
        self.outbound.flush(self.upstream.push, self.clock.wall_ms())

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(self.wake_w, b"o")

    # --- effects --------------------------------------------------------------------------

    def _act(self, effect: Effect) -> None:
        match effect:
            case Remember(job_id=job_id):
                self._remember(job_id)
            case Reply(kind=kind, job_id=job_id):
                if kind == "aborted":
                    self.launcher.forget(job_id)
                self.outbound.queue(REPLY_TYPES[kind], effect.fields())
            case StartProcess(job_id=job_id):
                self._start(job_id)
            case KillProcess(job_id=job_id, reason=reason):
                self.launcher.kill(job_id, reason)
            case Hold(commit=commit):
                self.launcher.hold(commit)
            case Resend(job_id=job_id, kind=kind, body=body):
                self.outbound.resend(job_id, kind, body)
            case Rediscover():
                self.upstream.rediscover("the server no longer accepts this node's session")
            case BeatNow():
                self.outbound.beat_now(self.clock.monotonic())

    def _remember(self, job_id: str) -> bool:
        """Record a commit before its ack; one the journal cannot take is nacked, unheld."""
        reason = self.writes.remember(job_id, self.clock.wall_ms())
        if reason is None:
            if not self.leftovers_ended:  # the journal could not be read at start-up
                self._end_leftovers()
            return True
        self.launcher.forget(job_id)
        for action in self.runner.unrecorded(job_id, reason):
            self._act(action)
        return False

    def _start(self, job_id: str) -> None:
        try:
            execution = self.launcher.start(job_id, self.whitelist.resolve)
        except ExecutionError as exc:
            self.runner.start_failed(job_id)
            failure = {"exit_status": None, "reason": str(exc), "duration_ms": 0}
            self.outbound.outcome(job_id, "failed", failure, self.clock.wall_ms())
            return
        self.writes.running(job_id, execution.pid, start_time(execution.pid) or 0)
        command = self.launcher.commits[job_id].command
        log.info("job %s: started %s (pid %d)", job_id, command, execution.pid)
        # No ``started`` reply: the server acts on none (``ack_run`` said the node runs
        # the job), and at a fleet's scale it was one signed message in four for a
        # server or edge to verify and drop. Servers still accept it from older agents.

    def _end_leftovers(self) -> None:
        """Kill what a dead predecessor left running (``leftovers.py``), and report it."""
        leftovers = self.writes.still_running()
        if leftovers is None:
            return  # done once a commit is recorded, before it is acked
        self.leftovers_ended = True
        for job_id, pgid, started in leftovers:
            if kill_if_same(pgid, started):
                log.warning("job %s: still running from before this agent started; killed", job_id)
                reason = "the agent died while it ran; killed when the agent restarted"
                failure = {"exit_status": None, "reason": reason, "duration_ms": 0}
                self.outbound.outcome(job_id, "failed", failure, self.clock.wall_ms())
            self.writes.ended(job_id)

    # --- config from discovery -----------------------------------------------------------

    def apply_config(self, cfg: m.NodeConfig, endpoint: str) -> None:
        """Take ``cfg`` from discovery: new session key, fresh inboxes, the server online."""
        self.upstream.follow(cfg, endpoint)
        limits = Limits(max_body_bytes=cfg.max_body_bytes)
        secret = session_key(cfg.session_key_b64)
        self.intake.rekey(cfg, secret, self.outbound.key_id, limits)
        self.outbound.rekey(HmacSigner(cfg.session_key_id, secret), limits, cfg.interval_s)
        self.outbound.resend_last(self.clock.wall_ms() - RESEND_OUTCOME_WITHIN_MS)
        self.outbound.beat_now(self.clock.monotonic())

    # --- stopping -------------------------------------------------------------------------

    def shutdown(self) -> None:
        job_id = self.launcher.running
        if job_id is not None:
            log.info("stopping: aborting job %s", job_id)
            self.launcher.stop("agent stopping", STOP_GRACE_S)
            self._on_outcomes()
            self._flush()
        self.transport.close()
        self.journal.close()
        if self.reaper is not None:
            self.reaper.close()
        self.containment.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
