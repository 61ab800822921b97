"""Schedule partitions: the hash of a schedule id, and this server's share as the log's
``schedulers`` group assigns it (``pushjobs/log/shares.py`` on a memory log with the fake
clock; the assignment itself is tested in ``tests/log/test_assignor.py``)."""

from __future__ import annotations

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import FencedError
from pushjobs.log.base import TopicPolicy
from pushjobs.log.memory import MemoryLog, MemoryStore
from server.core.schedshards import partition_of, partition_topics, topic_of
from server.shell.schedpartitions import Partitions, group_of

TOPICS = partition_topics("p.schedules", 8)
SESSION_S = 5.0


def test_a_schedule_id_hashes_to_the_same_partition_in_every_process() -> None:
    # Pinned: a change of hash would strand every schedule in a partition it is not in.
    assert partition_of("a1b2c3d4e5f6", 8) == 6
    assert partition_of("x", 8) == 4
    assert topic_of("p.schedules", "x", 8) == "p.schedules.4"
    assert TOPICS[0] == "p.schedules" and TOPICS[1:] == [f"p.schedules.{i}" for i in range(8)]
    counts = [0] * 8
    for i in range(8000):
        counts[partition_of(f"{i:012x}", 8)] += 1
    assert min(counts) > 800  # spread evenly enough


# --- the group ---------------------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=1_800_000_000_000)


def server(store: MemoryStore, clock: FakeClock, sid: str) -> Partitions:
    log = MemoryLog(store, clock=clock)
    for topic in TOPICS:
        log.create_topic(topic, TopicPolicy(compacted=True))
    return Partitions(
        log,
        TOPICS,
        group=group_of("p.schedules"),
        member_id=f"{sid}@nowhere/1",
        session_s=SESSION_S,
    )


def test_the_group_is_named_after_the_prefix() -> None:
    assert group_of("pushjobs.schedules") == "pushjobs.schedulers"
    assert group_of("other") == "otherschedulers"


def test_a_lone_server_owns_every_partition(clock: FakeClock) -> None:
    a = server(MemoryStore(), clock, "a:1")
    changes = a.renew()
    assert sorted(changes.gained) == sorted(TOPICS) and not changes.lost
    assert a.owned() == set(TOPICS)
    assert not a.renew().gained  # held: nothing changes


def test_a_join_hands_partitions_over_and_a_death_takes_them_back(clock: FakeClock) -> None:
    store = MemoryStore()
    a, b = server(store, clock, "a:1"), server(store, clock, "b:1")
    a.renew()
    # b joins: it waits for its share until a, at its next poll, hands it over.
    assert b.renew().gained == []
    lost = a.renew().lost
    assert len(lost) in (4, 5) and a.owned() == set(TOPICS) - set(lost)
    gained = b.renew().gained
    assert set(gained) == set(lost) and b.owned() == set(lost)
    assert not a.renew().lost and not b.renew().gained  # and it stays that way
    old = {t: a.fence(t) for t in a.owned()}
    # a dies (stops polling): b takes its partitions once a's session has run out.
    clock.advance(SESSION_S / 3)
    assert b.renew().gained == []
    clock.advance(SESSION_S)
    assert set(b.renew().gained) == set(old)
    assert b.owned() == set(TOPICS)
    # a's fences are stale: a late write of a's is refused by the log.
    topic, fence = next(iter(old.items()))
    assert fence is not None
    fresh = b.fence(topic)
    assert fresh is not None and fresh.epoch > fence.epoch
    with pytest.raises(FencedError):
        a.log.append(topic, "fire:x", b"{}", fence=fence)


def test_a_server_that_leaves_releases_what_it_held(clock: FakeClock) -> None:
    store = MemoryStore()
    a, b = server(store, clock, "a:1"), server(store, clock, "b:1")
    a.renew()
    b.renew()
    a.renew()
    assert b.renew().gained
    a.close()  # a clean stop: no session to wait out
    assert a.owned() == set()
    assert b.renew().gained and b.owned() == set(TOPICS)


def test_a_fenced_write_gives_the_partition_back_until_a_poll_grants_it(
    clock: FakeClock,
) -> None:
    a = server(MemoryStore(), clock, "a:1")
    a.renew()
    topic = TOPICS[1]
    a.lose(topic)
    assert topic not in a.owned()
    assert a.renew().gained == [topic]  # the lease is still a's: read it back


@pytest.mark.parametrize("count", [0, -1, 257])
def test_a_partition_count_out_of_range_is_refused_in_the_config(count: int) -> None:
    from server.shell.serverconfig import ServerSection

    problems = dict(ServerSection(schedule_partitions=count).check())
    assert "1 to 256" in problems["schedule_partitions"]
    assert "schedule_partitions" not in dict(ServerSection(schedule_partitions=8).check())


def test_a_late_write_of_a_deposed_writer_is_skipped_per_kind_of_key() -> None:
    from pushjobs.log.base import Record
    from server.shell.schedlog import Fold

    def rec(offset: int, key: str, value: bytes, epoch: int) -> Record:
        return Record("t", offset, key, value, 0, epoch)

    fold = Fold()
    kept = fold.apply(
        [
            rec(0, "schedule:a", b"def", 7),  # the leader's epoch: another group's
            rec(1, "fire:a", b"one", 2),
            rec(2, "fire:a", b"two", 3),  # a new owner
            rec(3, "fire:a", b"late", 2),  # the old owner, on Kafka, after it
            rec(4, "schedule:b", b"def", 7),
            rec(5, "fire:b", b"free", 0),  # unfenced: never late
        ]
    )
    assert [r.offset for r in kept] == [0, 1, 2, 4, 5]
    assert fold.values["fire:a"] == b"two"
