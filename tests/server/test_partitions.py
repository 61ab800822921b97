"""Schedule partitions: the hash of a schedule id, rendezvous assignment over the live
servers (every server agrees, a join or a leave moves only what it must), and the leases
that follow it on a memory log with the fake clock."""

from __future__ import annotations

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import FencedError
from pushjobs.log.base import TopicPolicy
from pushjobs.log.memory import MemoryLog, MemoryStore
from server.partitions import Partitions
from server.shards import assign, mine, owner_of, partition_of, partition_topics, topic_of

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


def test_every_server_computes_the_same_assignment() -> None:
    servers = ["a:1", "b:2", "c:3"]
    one = assign(TOPICS, servers)
    assert one == assign(reversed(TOPICS), list(reversed(servers))) == assign(TOPICS, servers * 2)
    assert set(one) == set(TOPICS) and set(one.values()) <= set(servers)
    assert all(owner_of(p, servers) == one[p] for p in TOPICS)
    assert assign(TOPICS, []) == {}


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_a_join_moves_partitions_only_to_the_newcomer(count: int) -> None:
    topics = partition_topics("t", 64)
    servers = [f"s{i}:x" for i in range(count)]
    before = assign(topics, servers)
    after = assign(topics, [*servers, "new:y"])
    moved = {p for p in topics if before[p] != after[p]}
    assert moved == mine(after, "new:y")
    assert 0 < len(moved) < 64


@pytest.mark.parametrize("count", [2, 3, 5])
def test_a_leave_moves_only_the_leavers_partitions(count: int) -> None:
    topics = partition_topics("t", 64)
    servers = [f"s{i}:x" for i in range(count)]
    before = assign(topics, servers)
    gone = servers[0]
    after = assign(topics, servers[1:])
    moved = {p for p in topics if before[p] != after[p]}
    assert moved == mine(before, gone)
    assert all(after[p] != gone for p in topics)


def test_partitions_share_out_roughly_evenly() -> None:
    topics = partition_topics("t", 256)
    shares = [len(mine(assign(topics, ["a:1", "b:1", "c:1", "d:1"]), f"{s}:1")) for s in "abcd"]
    assert sum(shares) == 257 and min(shares) > 30


# --- the leases ---------------------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=1_800_000_000_000)


def server(store: MemoryStore, clock: FakeClock, sid: str) -> Partitions:
    log = MemoryLog(store, clock=clock)
    for topic in TOPICS:
        log.create_topic(topic, TopicPolicy(compacted=True))
    return Partitions(log, TOPICS, server_id=sid, member_id=f"{sid}@nowhere/1", session_s=SESSION_S)


def test_a_lone_server_owns_every_partition(clock: FakeClock) -> None:
    a = server(MemoryStore(), clock, "a:1")
    changes = a.renew([])
    assert sorted(changes.gained) == sorted(TOPICS) and not changes.lost
    assert a.owned() == set(TOPICS)
    assert not a.renew(["a:1"]).gained  # held: nothing changes


def test_a_join_hands_partitions_over_and_a_death_takes_them_back(clock: FakeClock) -> None:
    store = MemoryStore()
    a, b = server(store, clock, "a:1"), server(store, clock, "b:1")
    a.renew(["a:1"])
    both = ["a:1", "b:1"]
    wanted_b = mine(assign(TOPICS, both), "b:1")
    assert wanted_b and wanted_b != set(TOPICS)
    # b joins before a has heard of it: it waits for the partitions it is assigned.
    assert b.renew(both).gained == []
    lost = a.renew(both).lost  # a hears of b: hands b's share over at once
    assert set(lost) == wanted_b and a.owned() == set(TOPICS) - wanted_b
    gained = b.renew(both).gained
    assert set(gained) == wanted_b and b.owned() == wanted_b
    old = {t: a.fence(t) for t in a.owned()}
    # a dies (stops renewing): b takes its partitions once a's leases run out.
    clock.advance(SESSION_S / 3)
    assert b.renew(["b:1"]).gained == []
    clock.advance(SESSION_S)
    assert set(b.renew(["b:1"]).gained) == set(old)
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
    a.renew(["a:1"])
    b.renew(["a:1", "b:1"])
    a.close()  # a clean stop: no lease to wait out
    assert set(b.renew(["b:1"]).gained) == set(TOPICS)


def test_a_fenced_write_gives_the_partition_back_until_a_poll_grants_it(
    clock: FakeClock,
) -> None:
    a = server(MemoryStore(), clock, "a:1")
    a.renew([])
    topic = TOPICS[1]
    a.lose(topic)
    assert topic not in a.owned()
    assert a.renew([]).gained == [topic]  # the lease is still a's: read it back


@pytest.mark.parametrize("count", [0, -1, 257])
def test_a_partition_count_out_of_range_is_refused_in_the_config(count: int) -> None:
    from server.settings import ServerSection

    problems = dict(ServerSection(schedule_partitions=count).check())
    assert "1 to 256" in problems["schedule_partitions"]
    assert "schedule_partitions" not in dict(ServerSection(schedule_partitions=8).check())


def test_a_late_write_of_a_deposed_writer_is_skipped_per_kind_of_key() -> None:
    from pushjobs.log.base import Record
    from server.schedlog import Fold

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
