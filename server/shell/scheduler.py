"""Schedules over the servers: each fired by its partition's owner, started by the leader.

Theory of operation. Schedules live in P partition topics
(``core/schedshards.py``). Every server, leader or standby, owns the partitions the ordered log's
``schedulers`` group assigns it (``schedpartitions.py``, polled a third of a lease session
apart) and fires their schedules (``schedowner.py``): a fire is a ``fire:<id>`` record written
fenced by the partition's epoch, its job id derived from (schedule id, due time).

The leader does the rest. It reads every partition (``schedcatalog.py``): the API's
``schedule.*`` calls are answered from there, and a change is written to the schedule's
partition, fenced by the leader's epoch, before it is answered (the partition's owner
follows it). Each fire record it reads is a start request: the fire's job is started
through ``Jobs.start`` under the derived id, which starts a given id at most once, so a
fire read twice (the owner on the leader hands it over at once, then it is read) or
completed by a new leader starts one job. After a takeover, starts wait, for at most
``settle_ms``, until the nodes a fire targets are online again, so a restart alone does
not make a fire find its nodes away. And a fire starts only once its online targets are
free of other jobs (``_free``, in due order, for at most the schedule's ``busy_wait_s``,
5 minutes unless set): a node runs one job at a time and would refuse it ``busy``, so fires
released together after an outage would all fail but one. Who waits for what is decided as
for a job started with ``--busy-wait`` (``core/busywait.py``); a fire waits before its job
exists, though: until it starts it is not committed, so a next leader reads it again.

Killed at any line: an owner killed before a fire's write leaves the due time unsettled
and the partition's next owner finds it due; after it, the record is in the log and the
(next) leader starts it, once. A leader killed between reading a fire and starting it
leaves its committed offset before that record, so the next leader reads it again.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from pushjobs.api import methods
from pushjobs.clock import Clock
from pushjobs.errors import ApiError, LogError, NotFound, PushJobsError, ScheduleError
from pushjobs.log.base import TopicPolicy
from pushjobs.log.retry import Outage
from server.core.busywait import DEFAULT_FIRE_WAIT_MS, Claims, seconds
from server.core.jobparams import JobRequest, job_params, job_request
from server.core.schedfiring import DEFAULT_GRACE_MS, Fire
from server.core.schedshards import DEFAULT_PARTITIONS, partition_topics, topic_of
from server.core.schedule import (
    CatchUp,
    Overlap,
    Schedule,
    Trigger,
    describe,
    next_due,
)
from server.core.targeting import select
from server.shell.leaderjobs import Jobs
from server.shell.schedcatalog import Catalog, Entry
from server.shell.schedjobwatch import JobWatch
from server.shell.schedlog import agreed_count, key_of
from server.shell.schedowner import Owner
from server.shell.schedpartitions import Partitions, group_of

log = logging.getLogger("pushjobs.server")

SETTLE_POLL_MS = 100
# How often the partitions are read for what others wrote: every 200 ms, or, on a server
# that owns every partition (no other server shares them), backing off to once a second
# while reads find nothing (an idle server read 18 ends five times a second): what it
# reads then it wrote itself, and a definition it writes is read at the next tick
# (``_write``), a fire in the tick that wrote it.
FOLLOW_EVERY_MS = 200
FOLLOW_IDLE_MS = 1000
DEFAULT_SETTLE_MS = 15_000
# How long a fire waits for its targets to be free of other jobs before it starts anyway
# (and a node still busy refuses it ``busy``), unless its schedule says (``--busy-wait``).
BUSY_WAIT_MS = DEFAULT_FIRE_WAIT_MS
WAITED_KEPT = 10_000  # ``schedule history`` notes of fires that waited, this leader's


@dataclass(slots=True)
class Waiting:
    """A fire held back because a target is busy with another job."""

    since_ms: int  # when this leader first found it so
    targets: list[str]  # as selected then
    why: str = ""  # ``n1 busy with job X``, as last found


class Scheduler:
    def __init__(
        self,
        jobs: Jobs,
        topic: str,
        *,
        clock: Clock,
        grace_ms: int = DEFAULT_GRACE_MS,
        settle_ms: int = DEFAULT_SETTLE_MS,
        partitions: int = DEFAULT_PARTITIONS,
        outage: Outage | None = None,
    ) -> None:
        self.jobs = jobs
        self.clock = clock  # for API calls; the loop's ticks bring their own time
        self.leadership = jobs.leadership
        self.log = self.leadership.log
        self.topic = topic  # the partitions' base name (and the single-owner version's topic)
        self.count = agreed_count(self.log, topic, partitions, self.leadership.member.member_id)
        self.settle_ms = settle_ms
        topics = partition_topics(topic, self.count)
        for name in topics:
            self.log.create_topic(name, TopicPolicy(compacted=True))
        self.partitions = Partitions(
            self.log,
            topics,
            group=group_of(topic),
            member_id=self.leadership.member.member_id,  # ``name:incarnation@HOST/PID``
            session_s=self.leadership.session_s,
        )
        # A fire not started yet is active this long (the leader may be taking over).
        pending_ms = settle_ms + round(3 * self.leadership.session_s * 1000)
        self.watch = JobWatch(self.log, jobs.topics.assignments, pending_ms=pending_ms)
        self.now_ms = 0
        self.catalog = Catalog(self.log, topics, self._intern)
        self.owner = Owner(self.log, grace_ms=grace_ms, intern=self._intern)
        self.not_started: dict[tuple[str, int], str] = {}  # (sid, due) -> why, this leader
        self.unstarted: dict[str, Fire] = {}  # job id -> a fire read but not started
        self.waiting: dict[str, Waiting] = {}  # job id -> an unstarted fire's busy targets
        self.waited: dict[tuple[str, int], str] = {}  # (sid, due) -> how it waited, bounded
        self.loaded = False
        self.hold_until_ms = 0
        self.asked_ms = 0  # settling: when the nodes were last found away
        self.outage = Outage()  # the log failing: nothing is tried before ``retry_at_ms``
        self.server_outage = outage  # the server's own (``tenure.py``): not tried meanwhile
        self.retry_at_ms = 0
        self.renew_at_ms = 0
        self.follow_at_ms = 0
        self.follow_every_ms = FOLLOW_EVERY_MS
        self.followed_to = -1  # the partitions' read offsets, summed, at the last follow
        # Partition -> the server owning it, as the membership records say (serverd).
        self.owners: Callable[[], Mapping[str, str]] = dict
        self.watch_behind = True  # the schedules' jobs not read since (``_tick``)

    # --- partitions -------------------------------------------------------------------------

    def _intern(self, schedule: Schedule) -> Schedule:
        """The one object this server holds for ``schedule`` (the leader's catalog and the
        owner of its partition both need it: a copy each would double its memory)."""
        sid = schedule.schedule_id
        entry = self.catalog.entries.get(sid)
        for known in (entry.schedule if entry else None, self.owner.firing.schedule(sid)):
            if known is not None and known == schedule and known.job_json == schedule.job_json:
                return known
        return schedule

    def rebalance(self, now_ms: int) -> bool:
        """Poll this server's membership of the group; load what was gained (True if any)."""
        self.renew_at_ms = now_ms + round(self.leadership.session_s * 1000 / 3)
        for topic in self.owner.broken & self.partitions.owned():
            self.partitions.lose(topic)  # granted again at this poll: read back
        changes = self.partitions.renew()
        if changes.error is not None:
            self.renew_at_ms = now_ms  # again as soon as the log answers
        for topic in changes.lost:
            self.owner.drop(topic)
            log.info("schedule partition %s: no longer owned here", topic)
        for topic in changes.gained:
            fence = self.partitions.fence(topic)
            assert fence is not None
            try:
                armed = self.owner.load(topic, fence)
            except LogError:
                self.owner.broken.add(topic)  # read back once the log answers
                raise
            log.info("schedule partition %s: owned here, %d schedules armed", topic, armed)
        if changes.error is not None:
            raise changes.error
        return bool(changes.gained)

    def close(self) -> None:
        """A clean stop: every partition handed over at once."""
        self.owner.clear()
        self.partitions.close()

    # --- leadership -------------------------------------------------------------------------

    def take_over(self, now_ms: int) -> None:
        """Read every partition and complete what was fired; call after ``Jobs.take_over``."""
        self.stand_by()
        pending = self.catalog.load()
        coordinator = self.jobs.coordinator
        for fire in pending:
            if fire.job_id not in coordinator.jobs:
                self.unstarted[fire.job_id] = fire
        self.loaded = True
        self.hold_until_ms = now_ms + self.settle_ms
        self.follow_at_ms = 0
        log.info("%d schedules known, %d fires to complete", len(self.catalog), len(pending))

    def stand_by(self) -> None:
        """Not the leader: the partitions owned stay, the catalog and starts go."""
        self.catalog.clear()
        self.not_started.clear()
        self.unstarted.clear()
        self.waiting.clear()
        self.waited.clear()
        self.loaded = False

    # --- time -------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` has work next: a fire, a renewal, a follow. A poll asked "at once"
        (a renewal the log refused, a definition just written) waits ``SETTLE_POLL_MS``
        for the loop to wake for it (the turn that asked runs one anyway), and none is
        due while the server's log is out (``tick`` tries nothing then)."""
        polls: int | None = max(
            self.retry_at_ms,
            min(self.renew_at_ms, self.follow_at_ms),
            self.now_ms + SETTLE_POLL_MS,
        )
        if self.server_outage is not None and self.server_outage.active:
            polls = None
        due = self.owner.next_deadline_ms()
        if self.loaded and self.unstarted:
            due = self.hold_until_ms if due is None else min(due, self.hold_until_ms)
        if due is not None:
            # Settling with the nodes away: what is due waits, asked again now and then.
            due = max(due, self.asked_ms + SETTLE_POLL_MS) if self.loaded else due
        return due if polls is None else polls if due is None else min(due, polls)

    def tick(self, now_ms: int) -> None:
        """Everything due: partitions renewed, followed and fired, and (the leader) fires
        started. A log that fails stops it all until a backoff has passed: each call on a
        log that does not answer may wait its whole timeout."""
        self.now_ms = now_ms
        if now_ms < self.retry_at_ms or (self.server_outage and self.server_outage.active):
            return
        try:
            self._tick(now_ms)
        except LogError as exc:
            retry_at, line = self.outage.failed(exc, now_ms / 1000)
            self.retry_at_ms = round(retry_at * 1000)
            if line is not None:
                log.error("schedules: %s", line)
            return
        line = self.outage.recovered(now_ms / 1000)
        if line is not None:
            log.info("schedules: %s", line)

    def _tick(self, now_ms: int) -> None:
        gained = False
        if now_ms >= self.renew_at_ms or self.owner.broken:
            gained = self.rebalance(now_ms)
        following = now_ms >= self.follow_at_ms
        if following:
            read = sum(self.owner.offsets.values()) + sum(self.catalog.offsets.values())
            # Alone (every partition this server's), what it reads it wrote itself, and a
            # write asks for a read at once; with others, their fires wait on this read.
            alone = len(self.partitions.owned()) == len(self.partitions.topics)
            idle = read == self.followed_to and not gained and alone
            self.followed_to = read
            every = min(FOLLOW_IDLE_MS, 2 * self.follow_every_ms) if idle else FOLLOW_EVERY_MS
            self.follow_every_ms = every
            self.follow_at_ms = now_ms + every
            self.owner.follow()
        if self.leadership.leader or not len(self.owner):
            self.watch_behind = True  # not read meanwhile: the coordinator knows, or no use
        elif following or gained or self.watch_behind:
            # A partition gained (or a standby that was not reading) fires in this very
            # turn: the schedules' jobs are read first, or every fire of the last
            # ``pending_ms`` is unknown, counts as running, and ``--overlap skip`` drops
            # each due time pending at the gain (issue 27).
            self.watch.follow(now_ms)
            self.watch_behind = False
        fired = self.owner.tick(now_ms, self._active)
        if not self.leadership.leader:
            return
        if not self.loaded:
            self.take_over(now_ms)  # a read that failed: again now the log answers
        for fire in fired:  # fired here: started at once, read again later harmlessly
            self.unstarted[fire.job_id] = fire
        if following:
            found: list[Fire] = []
            try:
                self.catalog.follow(found)
            finally:
                for fire in found:
                    if fire.job_id not in self.jobs.coordinator.jobs:
                        self.unstarted[fire.job_id] = fire
        if not self.unstarted:
            self.catalog.commit(now_ms)
            return
        if now_ms < self.hold_until_ms and not self._nodes_back(now_ms):
            self.asked_ms = now_ms
            return
        for fire in self._free(now_ms):
            self._start(fire, now_ms)
        if self.waiting:
            self.asked_ms = now_ms  # looked again at the next poll, or as a job ends
        if not self.unstarted:
            self.catalog.commit(now_ms)

    def _active(self, job_id: str) -> bool:
        if not self.leadership.leader:
            return self.watch.active(job_id, self.now_ms)
        if job_id in self.unstarted:
            return True
        job = self.jobs.coordinator.jobs.get(job_id)
        return job is not None and not job.finished

    def _nodes_back(self, now_ms: int) -> bool:
        """Every node targeted by what would start now is online (asked while settling)."""
        online = set(self.jobs.liveness.online_peers())
        facts = list(self.jobs.nodes.facts())
        for sid in {f.schedule_id for f in self.unstarted.values()}:
            entry = self.catalog.entries.get(sid)
            if entry is None:
                continue
            try:
                targets = select(entry.schedule.job["nodes"], facts, exists=self.jobs.registered)
            except PushJobsError:
                return False
            if not set(targets) <= online:
                return False
        return True

    def _free(self, now_ms: int) -> list[Fire]:
        """The fires to start now, in due order: each whose targets no other job holds
        (nor a fire before it, started now or waiting), or that waited its bound.

        A node runs one job at a time and refuses another ``busy``: fires released
        together (after an outage, or due together) would all fail but one. One held back
        stays unstarted, so not committed: a next leader reads it again, and its job id
        is started at most once whoever starts it (issue 27)."""
        coordinator = self.jobs.coordinator
        # In line with the jobs started ``--busy-wait`` that wait (they hold no node):
        # the first to wait goes first, whoever started it.
        claims = Claims(lambda node: next(iter(coordinator.holding(node)), None))
        # Only a node that will be asked to commit can refuse: an offline one is not waited
        # for (the job finds it unavailable, as it would have).
        online = set(self.jobs.liveness.online_peers())
        out: list[Fire] = []
        for fire in sorted(self.unstarted.values(), key=lambda f: (f.due_ms, f.job_id)):
            waiting = self.waiting.get(fire.job_id)
            if fire.job_id in coordinator.jobs:
                out.append(fire)  # started already (read again): nothing to wait for
                continue
            targets = waiting.targets if waiting is not None else self._targets(fire)
            nodes = [node for node in targets if node in online]
            blocked = claims.blocked(nodes)
            held = next((blocked[node] for node in nodes if node in blocked), None)
            # Started now, it holds them (a fire due after is busy with it, not queued).
            claims.claim(fire.job_id, nodes, went=held is None)
            if held is None:
                if waiting is not None:
                    waited = seconds(now_ms - waiting.since_ms)
                    self._note(fire, f"fired after waiting {waited} s for {waiting.why}")
                out.append(fire)
                continue
            if waiting is None:
                waiting = self.waiting[fire.job_id] = Waiting(now_ms, targets)
            waiting.why = held.why()
            if now_ms - waiting.since_ms >= self._bound_ms(fire):
                waited = seconds(now_ms - waiting.since_ms)
                self._note(
                    fire,
                    f"fired after waiting {waited} s: {held.node} still busy with job "
                    f"{held.holder}",
                )
                log.warning(
                    "schedule %s: fire due at %d started after waiting %s s: %s",
                    fire.schedule_id,
                    fire.due_ms,
                    waited,
                    waiting.why,
                )
                out.append(fire)
        return out

    def _bound_ms(self, fire: Fire) -> int:
        """How long ``fire`` may wait for busy nodes: its schedule's ``--busy-wait``."""
        entry = self.catalog.entries.get(fire.schedule_id)
        wait_s = entry.schedule.job.get("busy_wait_s") if entry is not None else None
        if isinstance(wait_s, int | float) and not isinstance(wait_s, bool) and wait_s > 0:
            return round(wait_s * 1000)
        return BUSY_WAIT_MS

    def _targets(self, fire: Fire) -> list[str]:
        """The nodes ``fire`` would target now; [] if it cannot say (``_start`` will)."""
        entry = self.catalog.entries.get(fire.schedule_id)
        if entry is None:
            return []
        try:
            facts = list(self.jobs.nodes.facts())
            return select(entry.schedule.job["nodes"], facts, exists=self.jobs.registered)
        except (PushJobsError, KeyError, TypeError):
            return []

    def _note(self, fire: Fire, note: str) -> None:
        self.waiting.pop(fire.job_id, None)
        if len(self.waited) >= WAITED_KEPT:
            del self.waited[next(iter(self.waited))]  # the oldest note
        self.waited[(fire.schedule_id, fire.due_ms)] = note

    def _start(self, fire: Fire, now_ms: int) -> None:
        entry = self.catalog.entries.get(fire.schedule_id)
        if entry is None:
            self.unstarted.pop(fire.job_id, None)
            return  # deleted since
        request: JobRequest | None = None
        try:
            # The fire waited for busy nodes here already: its job does not wait again.
            request = replace(job_request(entry.schedule.job), busy_wait_s=None)
            self.jobs.start(
                request,
                f"schedule:{fire.schedule_id}",
                now_ms,
                job_id=fire.job_id,
                schedule_id=fire.schedule_id,
                on_behalf_of=entry.schedule.created_by or None,
            )
        except ApiError as exc:
            if exc.code == methods.NOT_LEADER:
                return  # kept: the next leader reads it again (not committed)
            self._failed(fire, exc)
            if request is None:
                # Its kept job fails today's checks, before anything is written: kept by a
                # version before timeouts were bounded (``jobparams.py``), so would every
                # fire. The fleet's refusals (``Jobs.start``) pass: the schedule goes on.
                self._pause(fire, str(exc))
        except LogError:
            raise  # kept: started once the log answers
        except (PushJobsError, KeyError, TypeError, ValueError) as exc:
            self._failed(fire, exc)
        self.unstarted.pop(fire.job_id, None)
        self.waiting.pop(fire.job_id, None)

    def _failed(self, fire: Fire, exc: Exception) -> None:
        log.warning(
            "schedule %s: fire due at %d not started: %s", fire.schedule_id, fire.due_ms, exc
        )
        self.not_started[(fire.schedule_id, fire.due_ms)] = f"not started: {exc}"

    def _pause(self, fire: Fire, reason: str) -> None:
        """Pause, as ``schedule pause`` does (durable, for every leader), a recurring
        schedule whose every fire would be refused alike (``Catalog.auto_paused``)."""
        changed = self.catalog.auto_paused(fire.schedule_id, fire.due_ms, reason)
        if changed is None:
            return
        try:
            self._write(fire.schedule_id, changed, changed.topic)
        except ApiError:
            return  # deposed: the next leader pauses it at its next fire
        log.error("schedule %s paused: %s (resume it once fixed)", fire.schedule_id, reason)

    # --- the API ----------------------------------------------------------------------------

    def _leading(self) -> None:
        if not self.leadership.leader or not self.loaded:
            raise ApiError("this server is not the leader", code=methods.NOT_LEADER)

    def _get(self, schedule_id: str) -> Entry:
        self._leading()
        entry = self.catalog.entries.get(schedule_id)
        if entry is None:
            raise NotFound(f"no schedule {schedule_id!r}")
        return entry

    def _write(self, sid: str, entry: Entry | None, topic: str) -> None:
        """A definition written to its partition (fenced by this leader's epoch), then
        known here (a tombstone: forgotten); not written (raises): not known either."""
        value = None
        if entry is not None:
            value = orjson.dumps({"schedule": entry.schedule.to_json(), "from_ms": entry.from_ms})
        self.leadership.append(topic, [(key_of(sid), value)])
        self.catalog.put(sid, entry)
        self.follow_at_ms = 0  # its owner may be this server: read it at the next tick

    def add(
        self,
        params: Mapping[str, Any],
        caller: str,
        trigger: Trigger,
        catch_up: CatchUp,
        overlap: Overlap,
    ) -> dict[str, Any]:
        """A new schedule of the ``job.start`` params in ``params``; durable once answered."""
        self._leading()
        now_ms = self.clock.wall_ms()
        kept = job_params(params, self.jobs.sender.secrets)
        # Its fires are refused alike (``Jobs.start``) if the server's [halt] changes since.
        refused = self.jobs.halt.refusal(kept["options"].get("halt_if"))
        if refused is not None:
            raise ApiError(refused, code=methods.BAD_REQUEST)
        try:
            schedule = Schedule.of(
                secrets.token_hex(6),
                kept,
                trigger,
                catch_up=catch_up,
                overlap=overlap,
                created_ms=now_ms,
                created_by=caller,
            )
        except ScheduleError as exc:
            raise ApiError(str(exc), code=methods.BAD_REQUEST) from None
        if next_due(schedule, now_ms) is None:
            raise ApiError("that time has passed: it would never fire", code=methods.BAD_REQUEST)
        sid = schedule.schedule_id
        entry = Entry(schedule, now_ms, topic_of(self.topic, sid, self.count))
        self._write(sid, entry, entry.topic)  # not durable: not kept (raises)
        log.info("schedule %s: %s %s, by %s", sid, schedule.command, describe(schedule), caller)
        return self._view(sid, self.owners())

    def set_paused(self, schedule_id: str, paused: bool) -> dict[str, Any]:
        entry = self._get(schedule_id)
        # Resumed: what fell due while paused is not fired. Unchanged: nothing written.
        from_ms = entry.from_ms if paused else max(entry.from_ms, self.clock.wall_ms())
        changed = Entry(entry.schedule.with_paused(paused), from_ms, entry.topic)
        if entry.schedule.paused is not paused:
            self._write(schedule_id, changed, entry.topic)
        return self._view(schedule_id, self.owners())

    def delete(self, schedule_id: str) -> dict[str, Any]:
        entry = self._get(schedule_id)
        self._write(schedule_id, None, entry.topic)
        return {"deleted": schedule_id, "command": entry.schedule.command}

    def rows(self) -> list[dict[str, Any]]:
        self._leading()
        owners = self.owners()
        return sorted(
            (self._view(sid, owners) for sid in self.catalog.entries),
            key=lambda r: r["created_ms"],
        )

    def show(self, schedule_id: str) -> dict[str, Any]:
        self._get(schedule_id)
        return self._view(schedule_id, self.owners())

    def _view(self, sid: str, owners: Mapping[str, str]) -> dict[str, Any]:
        """The catalog's view and who fires it: its partition's owner (``name:incarnation``,
        None while no live server has said it owns it, e.g. just after its owner died)."""
        view = self.catalog.view(sid)
        view["owner"] = owners.get(view["partition"])
        return view

    def fires(self, schedule_id: str) -> list[dict[str, Any]]:
        self._get(schedule_id)
        coordinator = self.jobs.coordinator
        out = []
        for entry in self.catalog.fires(schedule_id):
            row = dict(entry)
            job = coordinator.jobs.get(str(entry.get("job_id")))
            row["job_state"] = job.state.value if job is not None else None
            row.setdefault("outcome", "fired")
            key = (schedule_id, int(entry.get("due_ms") or 0))
            waiting = self.waiting.get(str(entry.get("job_id")))
            if waiting is not None and job is None:
                so_far = seconds(self.clock.wall_ms() - waiting.since_ms)
                row["outcome"] = f"waiting: {waiting.why}, for {so_far} s so far"
            elif key in self.waited and entry.get("job_id"):
                row["outcome"] = self.waited[key]
            why = self.not_started.get(key)
            if why is not None and entry.get("job_id"):
                row["outcome"] = why
            out.append(row)
        return out
