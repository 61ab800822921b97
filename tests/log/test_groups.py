"""The ordered log's groups over several topics (``OrderedLog.group``), on every backend.

The contract (``pushjobs.log.base``): every topic has at most one owner at a time, and a
deposed owner's fenced append is refused; with N live members each owns floor or ceil of
P/N topics; a member that joins gets its share; one that closes, or stops polling past its
session, loses its topics to the others; while membership does not change every owner
keeps its topics and their epochs. Kafka's own group protocol does the assigning on the
Kafka backend, the emulation (``pushjobs.log.shares``) on memory and sqlite.
"""

from __future__ import annotations

import sqlite3

import pytest

from pushjobs.clock import SystemClock
from pushjobs.errors import FencedError, LogError, UnknownTopic
from pushjobs.log.base import Fence, TopicPolicy, share_fence_group
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from tests.log.children import spec_arg
from tests.support import wait_until

GROUP = "schedulers"


def _topics(log, count):
    names = [f"part.{i}" for i in range(count)]
    for name in names:
        log.create_topic(name, TopicPolicy(compacted=True))
    return names


def _join(log_backend, topics, *ids):
    return [
        log_backend.open().group(GROUP, topics, i, session_timeout_s=log_backend.session_s)
        for i in ids
    ]


def _poll(shares):
    """Poll each member once, in turn; no topic may be owned by two of them."""
    owned = [share.poll() for share in shares]
    seen = [topic for fences in owned for topic in fences]
    assert len(seen) == len(set(seen)), f"a topic with two owners: {owned}"
    return owned


def _settled(shares, topics, sizes):
    """Wait until ``shares`` own every topic between them, ``sizes`` (sorted) each."""

    def done():
        owned = _poll(shares)
        covered = sorted(t for fences in owned for t in fences) == sorted(topics)
        return owned if covered and sorted(len(f) for f in owned) == sorted(sizes) else None

    return wait_until(done, 3 * WAIT_FACTOR)


WAIT_FACTOR = 20.0  # seconds; a Kafka rebalance on the mock cluster takes several


def test_members_share_the_topics_evenly_and_keep_them(log_backend):
    topics = _topics(log_backend.open(), 7)
    shares = _join(log_backend, topics, "a", "b", "c")
    assert [s.member_id for s in shares] == ["a", "b", "c"]
    owned = _settled(shares, topics, [2, 2, 3])
    for fences in owned:
        for topic, fence in fences.items():
            assert fence == Fence(share_fence_group(GROUP, topic), fence.epoch)
            assert fence.epoch > 0
    for _ in range(5):  # membership unchanged: nothing moves, no epoch changes
        assert _poll(shares) == owned


def test_a_member_that_joins_gets_its_share_and_the_rest_stay_put(log_backend):
    log = log_backend.open()
    topics = _topics(log, 6)
    first = _join(log_backend, topics, "a", "b")
    before = _settled(first, topics, [3, 3])
    shares = first + _join(log_backend, topics, "c")
    after = _settled(shares, topics, [2, 2, 2])
    for old, new in zip(before, after[:2], strict=True):
        for topic in set(old) & set(new):
            assert new[topic] == old[topic]  # a topic that stayed kept its epoch
    # A topic that moved is fenced for its previous owner, one that stayed is not.
    moved = next(iter(after[2]))  # "c" owns only topics that moved to it
    was = next(fences[moved] for fences in before if moved in fences)
    with pytest.raises(FencedError):
        log.append(moved, "k", b"late", fence=was)
    assert log.append(moved, "k", b"new", fence=after[2][moved]) == 0
    for fences in after:
        for topic, fence in fences.items():
            assert log.append(topic, "k", b"owner", fence=fence) >= 0


def test_closing_a_member_hands_its_topics_to_the_others(log_backend):
    topics = _topics(log_backend.open(), 4)
    a, b = _join(log_backend, topics, "a", "b")
    before = _settled([a, b], topics, [2, 2])
    a.close()
    assert a.poll() == {}
    (after,) = _settled([b], topics, [4])
    for topic in before[0]:
        assert after[topic].epoch > before[0][topic].epoch
    for topic in before[1]:
        assert after[topic] == before[1][topic]


def test_a_silent_member_loses_its_topics_and_its_late_write_is_fenced(log_backend):
    log = log_backend.open()
    topics = _topics(log, 4)
    stalled, live = _join(log_backend, topics, "a", "b")
    before = _settled([stalled, live], topics, [2, 2])
    topic, old = next(iter(before[0].items()))
    assert log.append(topic, "k", b"by a", fence=old) == 0

    log_backend.expire(log_backend.session_s + 0.1)  # "a" stops polling past its session
    (after,) = _settled([live], topics, [4])
    assert after[topic].epoch > old.epoch
    assert log.append(topic, "k", b"by b", fence=after[topic]) == 1
    with pytest.raises(FencedError):  # "a" wakes up late and tries to write
        log.append(topic, "k", b"late a", fence=old)
    assert [r.value for r in log.read(topic)] == [b"by a", b"by b"]


def test_groups_check_their_topics_and_session(log_backend):
    log = log_backend.open()
    topics = _topics(log, 2)
    with pytest.raises(UnknownTopic):
        log.group(GROUP, [*topics, "nope"], "a", session_timeout_s=log_backend.session_s)
    with pytest.raises(LogError, match="session timeout must be greater than 0"):
        log.group(GROUP, topics, "a", session_timeout_s=0.0)


def test_a_closed_handle_stops_its_members(log_backend):
    log = log_backend.open()
    topics = _topics(log, 2)
    share = log.group(GROUP, topics, "a", session_timeout_s=log_backend.session_s)
    _settled([share], topics, [2])
    log.close()
    assert share.poll() == {}
    (other,) = _join(log_backend, topics, "b")
    _settled([other], topics, [2])


def test_a_sigkilled_member_loses_its_topics_to_the_others(log_backend, children):
    log_backend.require("processes")
    log = log_backend.open(clock=SystemClock())  # the child's clock: leases compare them
    topics = _topics(log, 4)
    spec = spec_arg(log_backend.spec())
    session = str(log_backend.session_s)
    a = children("-m", "tests.log.share_proc", spec, GROUP, "a", session, *topics)
    line = a.expect("owns part.", timeout_s=log_backend.takeover_s)
    while len(line.split()) < 5:
        line = a.expect("owns", timeout_s=log_backend.takeover_s)
    by_a = {t: int(e) for t, e in (w.split(":") for w in line.split()[1:])}
    assert sorted(by_a) == topics

    b = log.group(GROUP, topics, "b", session_timeout_s=log_backend.session_s)
    wait_until(lambda: len(b.poll()) == 2, 3 * WAIT_FACTOR)  # b gets its share from a
    a.kill()

    def all_four():
        owned = b.poll()
        return owned if len(owned) == 4 else None

    owned = wait_until(all_four, 3 * WAIT_FACTOR)
    for topic, fence in owned.items():
        assert fence.epoch >= by_a[topic]
    moved = [t for t, f in owned.items() if f.epoch > by_a[t]]
    assert len(moved) >= 2  # a's last topics came with new epochs
    for topic in moved:
        with pytest.raises(FencedError):  # the dead member's epoch writes nothing
            log.append(
                topic, "k", b"late", fence=Fence(share_fence_group(GROUP, topic), by_a[topic])
            )


def test_a_log_file_from_before_groups_gets_its_roster_on_first_use(tmp_path):
    path = tmp_path / "old.db"
    SqliteLog(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE roster")  # as a file written before groups existed
    db.commit()
    db.close()
    log = SqliteLog(path)
    try:
        topics = _topics(log, 3)
        share = log.group(GROUP, topics, "a", session_timeout_s=1.0)
        assert sorted(share.poll()) == topics
    finally:
        log.close()
