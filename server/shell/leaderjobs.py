"""Job effects: the coordinator of a leader, fed from every side, and its log-first flush.

Theory of operation. Node intake, the API and time hand their inputs here; the pure
coordinator answers with changes (to persist) and sends (to deliver), which pile up until
``flush``. A flush writes the changed jobs' snapshot chunks to ``assignments`` and the
events to ``events`` in batched durable writes, and only then sends the commands: a
command on the wire always follows its durable cause. A start or abort request is written
to ``commands`` before the coordinator hears of it.

A rolling job's health signal (``--halt-if``) must be one this server's ``[halt]``
settings allow (refused before anything is written); its checks run off the loop
(``healthchecks.py``), asked for by the job's ``Check`` effects after the flush, and
their answers come back through ``health``.

The server's policy (``policy.py``) is asked about every start: a job it forbids is
refused before anything is written; one it holds is written and created
``awaiting_approval`` (its rule and expiry in its start request and its snapshot). An
approval or a rejection (``approve``, ``reject``) is written to ``commands`` before the
coordinator hears of it, like a start or an abort; a new leader that finds one for a job
its snapshot still shows held applies it (``take_over``): a decision acknowledged is never
lost, and a job is approved, so started, once.

Standing by (the lease lost, or a write fenced) empties this: a new coordinator, nothing
pending; the jobs now belong to the new leader. Taking over fills it from the log
(``takeover.py``).

For the takeover's grace (the full offline window every node gets, ``grace_ms``) the
fleet is still moving here: a job started then waits for the targets this leader has not
heard yet (``awaiting.py``) rather than finding them ``unavailable``, and its selectors
match the nodes known before the takeover (those of the jobs in the log, and the
registered ones ``known_nodes`` lists) as well as those heard since.

Killed at any line: what was not flushed was never acted on (no command left before its
cause was durable), and the next leader rebuilds from what was.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pushjobs.api import methods
from pushjobs.errors import ApiError
from pushjobs.log.topics import TopicNames
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import Message
from server.core import records
from server.core.coordinator import Change, Coordinator
from server.core.effects import Check, Send
from server.core.jobparams import JobRequest
from server.core.nodetable import NodeTable
from server.core.policy import Hold, Policy, is_glob, refusal
from server.core.targeting import select
from server.shell.commands import ASKED_KEEP_MS, CommandSender
from server.shell.healthchecks import HealthChecks
from server.shell.leadership import Leadership
from server.shell.recovery import recover
from server.shell.serverconfig import HaltSettings, JobSettings
from server.shell.takeover import take_over

log = logging.getLogger("pushjobs.server")


class Jobs:
    def __init__(
        self,
        settings: JobSettings,
        leadership: Leadership,
        *,
        topics: TopicNames,
        sender: CommandSender,
        nodes: NodeTable,
        liveness: LivenessTracker,
        server_name: str,
        registered: Callable[[str], bool],
        known_nodes: Callable[[], Iterable[str]] | None = None,
        policy: Policy | None = None,
        role_of: Callable[[str], str | None] | None = None,
        halt: HaltSettings | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy or Policy()
        self.role_of = role_of or (lambda _caller: None)  # a user key's role
        self.halt = halt or HaltSettings()
        # Rolling jobs' health checks, run off the loop (``healthchecks.py``).
        self.checks = HealthChecks(self.halt.prometheus_url, self.halt.max_running)
        self.leadership = leadership
        self.topics = topics
        self.sender = sender
        self.nodes = nodes
        self.liveness = liveness
        self.server_name = server_name
        self.registered = registered  # a node name the key registry knows
        self.known_nodes = known_nodes  # the registry's node names, when it can list them
        # The takeover's grace (wall ms), the nodes heard since, the nodes known before.
        self.grace_until_ms: int | None = None
        self.heard: set[str] = set()
        self.known_before: set[str] = set()
        self.coordinator = self._new_coordinator()
        self.changes: list[Change] = []
        self.liveness_changes: list[records.LivenessChange] = []
        self.sends: list[Send] = []
        self.stopping = False

    def _new_coordinator(self) -> Coordinator:
        return Coordinator(
            self.settings.keep_finished,
            self.settings.keep_finished_nodes,
            self.settings.keep_finished_option_bytes,
            self.settings.keep_finished_output_bytes,
        )

    # --- leadership -------------------------------------------------------------------------

    def stand_by(self) -> None:
        self.coordinator = self._new_coordinator()
        self.checks.forget()
        self._end_grace()
        self.changes.clear()
        self.sends.clear()

    def take_over(
        self, standby_replies: deque[Message], now_ms: int, grace_ms: int
    ) -> set[str] | None:
        """Rebuild from the log; the nodes to wait for, or None if deposed at once."""
        found = recover(self.leadership.log, self.topics)
        # A schedule's fire written but not started is the scheduler's to start (its job id
        # is derived, the start idempotent), once the nodes are back: not ended here.
        found.unstarted = [r for r in found.unstarted if "schedule_id" not in r]
        self.coordinator = self._new_coordinator()
        self.checks.forget()
        done = take_over(self.coordinator, found, standby_replies, now_ms, grace_ms)
        self.changes += done.changes
        try:
            self.leadership.append(self.topics.assignments, done.rewrite)
        except ApiError:
            return None  # deposed at once: leadership stood this server by
        log.info(
            "leader with epoch %d: %d jobs restored (%d active), %d damaged",
            self.leadership.epoch or -1,
            len(found.jobs),
            done.active,
            len(found.damaged),
        )
        self.grace_until_ms = now_ms + grace_ms
        self.heard = set()
        self.known_before = {name for job, _ in found.jobs for name in job.nodes}
        for job_id, decision in found.decisions.items():
            self._redo_decision(job_id, decision, now_ms)
        return done.unfinished_nodes

    def _redo_decision(self, job_id: str, decision: Mapping[str, Any], now_ms: int) -> None:
        """A decision the previous leader wrote and may not have acted on: acted on now if
        the job is still held (else it was, and it is not again)."""
        job = self.coordinator.jobs.get(job_id)
        if job is None or not job.awaiting_approval:
            return
        by, reason = str(decision.get("by", "")), str(decision.get("reason", ""))
        if decision.get("type") == "approve":
            log.info("job %s: approved by %s before the takeover; starting it", job_id, by)
            self.changes += self.coordinator.approve(
                job_id,
                by,
                self.liveness.online_peers(),
                now_ms,
                reason=reason,
                unheard=self._awaited(list(job.nodes), self._unheard(now_ms)),
                unheard_until_ms=self.grace_until_ms,
            )
        elif decision.get("type") == "reject":
            self.changes += self.coordinator.reject(job_id, by, reason, now_ms)

    def _end_grace(self) -> None:
        self.grace_until_ms = None
        self.heard = set()
        self.known_before = set()

    def _unheard(self, now_ms: int) -> set[str] | None:
        """During the takeover's grace, the nodes known before it that this leader has
        not heard yet (registered ones only); None once the grace is over."""
        if self.grace_until_ms is None:
            return None
        if now_ms >= self.grace_until_ms:
            self._end_grace()
            return None
        listed = self.known_nodes() if self.known_nodes is not None else ()
        return {
            name
            for name in itertools.chain(self.known_before, listed)
            if name not in self.heard
            and not self.liveness.is_online(name)
            and self.registered(name)
        }

    # --- inputs -----------------------------------------------------------------------------

    def reply(self, message: Message, now_ms: int) -> None:
        self.changes += self.coordinator.reply(message, now_ms)

    def node_lost(self, node: str, now_ms: int, reason: str, *, restarted: bool = False) -> None:
        if self.leadership.leader:
            self.changes += self.coordinator.node_lost(node, now_ms, reason, restarted=restarted)

    def gone(self, node: str, now_ms: int, reason: str) -> None:
        """``node`` cannot come back (its key was revoked): not waited for offline."""
        if self.leadership.leader:
            self.changes += self.coordinator.gone(node, now_ms, reason)

    def node_online(self, node: str, now_ms: int) -> None:
        if self.grace_until_ms is not None:
            self.heard.add(node)
        if self.leadership.leader:
            # Repeats first, then a job that waited for it offline asks it: a change,
            # durable before its commit leaves (``flush``), and not repeated at once.
            self.sends += self.coordinator.node_online(node)
            self.changes += self.coordinator.admit(node, now_ms)

    def node_event(self, node: str, state: str, now_ms: int, reason: str | None = None) -> None:
        """``node`` went ``online`` or ``offline``: written with the turn's others."""
        self.liveness_changes.append(records.LivenessChange(node, state, now_ms, reason))

    def heartbeat(
        self, node: str, busy_with: str | None, busy_state: str | None, beat_ms: int, now_ms: int
    ) -> None:
        """Send again what a heartbeat shows never arrived, release a commit the node
        holds for a job that no longer wants it (see ``commands.py``), and a batch slot it
        kept since it was lost while in flight."""
        if not self.leadership.leader:
            return
        coordinator = self.coordinator
        self.changes += coordinator.heard(node, busy_with, busy_state, now_ms)
        sends = coordinator.unreported(node, busy_with, busy_state)
        stale = coordinator.stale_hold(node, busy_with, busy_state)
        if stale is not None:
            sends.append(stale)
        for send in sends:
            if self.sender.due_again(send, beat_ms):
                self.sends.append(send)

    def tick(self, now_ms: int) -> None:
        if self.leadership.leader:
            coordinator = self.coordinator
            self.changes += coordinator.tick(now_ms)
            # A node another job let go, waited for offline by a job: its turn now.
            for node in coordinator.take_freed():
                if self.liveness.is_online(node):
                    self.changes += coordinator.admit(node, now_ms)

    def health(self, now_ms: int) -> None:
        """The answers of the health checks in since the last call (``healthchecks.py``)."""
        for answer in self.checks.take():
            if not self.leadership.leader:
                continue
            if not answer.ok:
                log.warning(
                    "job %s: health check %d failed: %s", answer.job_id, answer.seq, answer.detail
                )
            self.changes += self.coordinator.health(
                answer.job_id, answer.seq, answer.ok, answer.detail, now_ms
            )

    def forget_sent(self, now_ms: int) -> None:
        self.sender.forget(now_ms - ASKED_KEEP_MS)

    # --- requests ---------------------------------------------------------------------------

    def start(
        self,
        request: JobRequest,
        caller: str,
        now_ms: int,
        *,
        job_id: str | None = None,
        schedule_id: str | None = None,
        on_behalf_of: str | None = None,
    ) -> str:
        """Start a job; with ``job_id`` given (a schedule's fire), a job id this leader
        already has is answered with that job, never started twice. ``on_behalf_of``: the
        key whose job it is for the policy, when not the caller (a schedule's creator)."""
        if self.stopping:
            raise ApiError("the server is stopping", code=methods.NOT_LEADER)
        if job_id is not None and job_id in self.coordinator.jobs:
            return job_id
        unheard = self._unheard(now_ms)
        targets = select(
            request.selectors,
            self.nodes.facts(),
            exists=self.registered,
            unheard=sorted(unheard or ()),
        )
        if len(targets) > self.settings.max_nodes:
            raise ApiError(
                f"{len(targets)} nodes selected; the limit is {self.settings.max_nodes}",
                code=methods.BAD_REQUEST,
            )
        halt_refused = self.halt.refusal(request.options.get("halt_if"))
        if halt_refused is not None:
            raise ApiError(halt_refused, code=methods.BAD_REQUEST)
        hold = self._judge(request, targets, on_behalf_of or caller, unheard, now_ms)
        job_id = job_id or f"{now_ms:x}{secrets.token_hex(4)}"
        run_timeout_s = request.run_timeout_s or self.settings.run_timeout_s
        vote_timeout_s = request.vote_timeout_s or self.settings.vote_timeout_s
        command = {
            "type": "start",
            "job_id": job_id,
            "command": request.command,
            "targets": targets,
            "quorum": str(request.quorum),
            "run_timeout_s": run_timeout_s,
            "vote_timeout_s": vote_timeout_s,
            "busy_wait_s": request.busy_wait_s,
            "offline_wait_s": request.offline_wait_s,
            "options": request.options,
            "requested_by": caller,
            "created_ms": now_ms,
        }
        if schedule_id is not None:
            command["schedule_id"] = schedule_id
        if hold is not None:
            command["approval"] = hold.to_json()
        # The request is durable before anything acts on it.
        self.leadership.append(self.topics.commands, records.start_records(job_id, command))
        self.changes += self.coordinator.submit(
            job_id,
            request.command,
            targets,
            self.liveness.online_peers(),
            now_ms,
            quorum=request.quorum,
            vote_timeout_ms=round(vote_timeout_s * 1000),
            run_timeout_ms=round(run_timeout_s * 1000),
            options=request.options,
            requested_by=caller,
            unheard=self._awaited(targets, unheard),
            unheard_until_ms=self.grace_until_ms,
            busy_wait_ms=round((request.busy_wait_s or 0) * 1000),
            offline_wait_ms=round((request.offline_wait_s or 0) * 1000),
            hold=hold,
        )
        log.info("job %s: %s on %d nodes, by %s", job_id, request.command, len(targets), caller)
        if hold is not None:
            log.info("job %s awaits approval: %s", job_id, hold.rule)
        return job_id

    def _judge(
        self,
        request: JobRequest,
        targets: list[str],
        caller: str,
        unheard: set[str] | None,
        now_ms: int,
    ) -> Hold | None:
        """The policy's word on a job of ``caller``'s: refused (``unauthorized``), held,
        or None: it starts at once."""
        policy = self.policy
        matches: dict[str, int] = {}
        if policy.max_glob_matches:
            facts = list(self.nodes.facts())
            for selector in request.selectors:
                if is_glob(selector):
                    hits = select(
                        [selector], facts, exists=self.registered, unheard=sorted(unheard or ())
                    )
                    matches[selector] = len(hits)
        verdict = policy.judge(
            request.selectors, len(targets), matches, request.command, self.role_of(caller)
        )
        if verdict.forbidden is not None:
            raise ApiError(verdict.forbidden, code=methods.UNAUTHORIZED)
        if verdict.rule is None:
            return None
        return Hold(verdict.rule, now_ms + policy.expiry_ms, caller)

    def _awaited(self, targets: list[str], unheard: set[str] | None) -> list[str]:
        """Of ``targets``, those to wait for: not heard since the takeover, in its grace."""
        if unheard is None:
            return []
        return [
            name for name in targets if name not in self.heard and not self.liveness.is_online(name)
        ]

    def decide(self, job_id: str, caller: str, now_ms: int, *, approve: bool, reason: str) -> None:
        """Approve or reject a held job: refused ``unauthorized`` for the requester's own
        approval, ``conflict`` for a job not awaiting approval; else written, then done."""
        job = self.coordinator.jobs.get(job_id)
        if job is None:
            raise ApiError(f"no job {job_id!r}", code=methods.NOT_FOUND)
        if not job.awaiting_approval:
            raise ApiError(
                f"job {job_id} is not awaiting approval (it is {job.state})",
                code=methods.CONFLICT,
            )
        why = refusal(job.requester, caller, approve=approve)
        if why is not None:
            raise ApiError(why, code=methods.UNAUTHORIZED)
        decision = {
            "type": "approve" if approve else "reject",
            "job_id": job_id,
            "by": caller,
            "reason": reason,
            "ts": now_ms,
        }
        # Durable before the job moves: a new leader finds it (``take_over``).
        self.leadership.append(self.topics.commands, [records.decision_record(job_id, decision)])
        if approve:
            unheard = self._unheard(now_ms)
            self.changes += self.coordinator.approve(
                job_id,
                caller,
                self.liveness.online_peers(),
                now_ms,
                reason=reason,
                unheard=self._awaited(list(job.nodes), unheard),
                unheard_until_ms=self.grace_until_ms,
            )
        else:
            self.changes += self.coordinator.reject(job_id, caller, reason, now_ms)
        verb = "approved" if approve else "rejected"
        log.info("job %s %s by %s%s", job_id, verb, caller, f": {reason}" if reason else "")

    def abort(self, job_id: str, caller: str, now_ms: int) -> None:
        record = {"type": "abort", "job_id": job_id, "requested_by": caller}
        self.leadership.append(self.topics.commands, [records.command_record(job_id, record)])
        self.changes += self.coordinator.abort(job_id, now_ms, f"aborted by {caller}")

    # --- persistence, then effects ----------------------------------------------------------

    def flush(self, now_ms: int) -> None:
        changes, self.changes = self.changes, []
        liveness, self.liveness_changes = self.liveness_changes, []
        if changes or liveness:
            jobs, versions = self.coordinator.jobs, self.coordinator.versions
            snapshots = [
                record
                for job_id, chunks in records.touched_chunks(changes, jobs).items()
                for record in records.snapshot_records(
                    jobs[job_id], versions.get(job_id, 0), chunks
                )
            ]
            events = records.job_events(changes, jobs, self.server_name)
            events += records.liveness_events(liveness, self.server_name)
            try:
                if snapshots:
                    self.leadership.append(self.topics.assignments, snapshots)
                if events and self.leadership.leader:
                    self.leadership.append(self.topics.events, events)
            except ApiError:
                self.sends.clear()  # deposed: the new leader owns these jobs now
        sends = [c for c in changes if isinstance(c, Send)] + self.sends
        self.sends = []
        if self.leadership.leader:
            for check in (c for c in changes if isinstance(c, Check)):
                self.checks.start(check)
            for send in sends:
                self.sender.send(send, self.coordinator.jobs.get(send.job_id), now_ms)
            self.sender.flush(now_ms)  # what was gathered per edge leaves now
            # A commit too large for its node's channel: that node votes no, written and
            # acted on now (a no vote sends no commit: this goes one level deep at most).
            for (job_id, node), why in self.sender.take_undeliverable().items():
                self.changes += self.coordinator.undeliverable(job_id, node, now_ms, why)
            if self.changes:
                self.flush(now_ms)
