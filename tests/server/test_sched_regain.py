"""A standby that gains a schedule partition fires it knowing the schedules' jobs.

Issue 27, item 1: a partition gained in a turn is fired in that turn, but a standby read
the schedules' jobs (``schedjobwatch.py``) only on its 200 ms follow and only while it
owned a partition. Gained in a turn that did not follow, every fire of the last 30 s was
unknown, so counted as running, and ``--overlap skip`` dropped each pending due time.
"""

from __future__ import annotations

from typing import Any

from pushjobs.clock import FakeClock
from pushjobs.log.memory import MemoryStore
from tests.server.test_scheduler import SESSION_S, Server

SCHEDULES = 16  # enough that the standby surely gains some of the 8 partitions


def every6s(server: Server) -> str:
    added: dict[str, Any] = server.call(
        "schedule.add", command="stamp", nodes=["n1"], cron="*/6 * * * * *"
    )["schedule"]  # default policies: catch-up once, overlap skip
    return str(added["schedule_id"])


def test_a_partition_gained_in_a_turn_that_does_not_follow_fires_pending_due_times() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000 - 1_800_000_000_000 % 6000 + 100)
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    sids = [every6s(a) for _ in range(SCHEDULES)]
    a.tick()  # a owns every partition
    clock.advance(6)  # due: every schedule fires on a; n1 is offline, so each job ends at once
    a.tick()
    first = clock.wall_ms() - 100
    ended = [j for j in a.jobs.coordinator.jobs.values() if j.finished]
    assert len(ended) == SCHEDULES
    b = Server(store, clock, "b")  # a standby: joins the group, owns nothing yet
    b.scheduler.tick(clock.wall_ms())
    clock.advance(SESSION_S / 3)
    a.tick()  # a's poll hands b its share
    assert a.scheduler.partitions.owned() != set(a.scheduler.catalog.topics)
    clock.advance(6 - SESSION_S / 3)  # the next due time passes before b polls again
    # b's gaining turn is not one of its 200 ms follows: the first to read the jobs.
    b.scheduler.follow_at_ms = clock.wall_ms() + 150
    b.scheduler.renew_at_ms = 0
    b.scheduler.tick(clock.wall_ms())
    gained = set(b.scheduler.owner.firing.states)
    assert gained and gained < set(sids)
    outcomes = {
        sid: [(f["due_ms"] - first, f["outcome"]) for f in b.scheduler.owner.history[sid]]
        for sid in gained
    }
    # a's fire, then b's: the previous fire's job had ended, so the pending due time runs.
    assert outcomes == {sid: [(0, "fired"), (6000, "fired")] for sid in gained}
