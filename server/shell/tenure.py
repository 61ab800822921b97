"""Tenure: the server's turn as leader, kept honest against its own pauses and the log's.

Theory of operation. ``renew`` polls the lease when it is due (``Leadership.renew``); on
becoming leader it has the jobs rebuilt from the log (``Jobs.take_over``), then the
schedules re-armed (``Scheduler.take_over``), gives every node a full offline window from
now and the nodes that owe results a grace period to show up. ``confirm`` is called
before a turn acts and before its flush sends: a leader whose lease may have lapsed on its
own clock (it was stopped) asks the log first.

A log that refuses writes (full, read-only, brokers down: ``BackendUnavailable``) is an
outage, not an end: the server stands by, since nothing may be decided that is not
durable, keeps watching its nodes, retries with backoff (``pushjobs.log.retry.Outage``)
and says so once when it starts and once when it ends.

Killed at any line: nothing here is durable; a restarted server joins the lease again.
"""

from __future__ import annotations

import logging

from pushjobs.clock import Clock
from pushjobs.config import LivenessSettings
from pushjobs.errors import BackendUnavailable
from pushjobs.log.retry import Outage
from pushjobs.protocol.liveness import LivenessTracker
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership, Lease
from server.shell.nodeintake import NodeIntake
from server.shell.scheduler import Scheduler

log = logging.getLogger("pushjobs.server")


class Tenure:
    def __init__(
        self,
        leadership: Leadership,
        *,
        jobs: Jobs,
        intake: NodeIntake,
        liveness: LivenessTracker,
        settings: LivenessSettings,
        clock: Clock,
        outage: Outage,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.leadership = leadership
        self.jobs = jobs
        self.scheduler = scheduler
        self.intake = intake
        self.liveness = liveness
        self.settings = settings
        self.clock = clock
        self.outage = outage

    def confirm(self, now: float) -> None:
        """A leader whose lease may have lapsed while it was not running asks the log before
        it answers, sends or writes anything more (``Leadership.acting``)."""
        if self.leadership.leader and not self.leadership.acting(now):
            self.renew(now, confirming=True)

    def renew(self, now: float, *, confirming: bool = False) -> None:
        lease = self.leadership.confirm if confirming else self.leadership.renew
        try:
            if lease(now) is Lease.TOOK_OVER:
                self.take_over(now)
        except BackendUnavailable as exc:
            self.unwritable(exc, now)
            return
        line = self.outage.recovered(now)
        if line is not None:
            log.info("%s", line)

    def take_over(self, now: float) -> None:
        live = self.settings
        self.liveness.grant(now)  # a full offline window for every node, from now
        grace_s = 3 * live.interval_s * live.offline_threshold + 2.0
        awaited = self.jobs.take_over(
            self.intake.standby_replies, self.clock.wall_ms(), round(grace_s * 1000)
        )
        if awaited is None:
            return  # deposed at once
        self.intake.await_nodes(awaited, now + grace_s)
        if self.scheduler is not None:  # after the jobs: it asks which fires have started
            self.scheduler.take_over(self.clock.wall_ms())

    def flush(self, now: float, now_ms: int) -> None:
        """Write the turn's job changes, then send what follows from them (``Jobs.flush``)."""
        self.confirm(now)  # stopped in the middle of the turn: ask before sending
        try:
            self.jobs.flush(now_ms)
        except BackendUnavailable as exc:
            self.unwritable(exc, now)

    def unwritable(self, exc: BackendUnavailable, now: float) -> None:
        """The log refuses writes: stand by, keep watching nodes, retry with backoff."""
        if self.leadership.leader:
            self.leadership.stand_by()
        retry_at, line = self.outage.failed(exc, now)
        self.leadership.next_renewal = retry_at
        if line is not None:
            log.error("%s; standing by meanwhile", line)
