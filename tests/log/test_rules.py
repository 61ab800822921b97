"""The lease rules and argument checks the embedded backends share (pure, one test per rule)."""

from __future__ import annotations

import pytest

from pushjobs.errors import LogError, RecordTooLarge
from pushjobs.log.base import Record, TopicPolicy
from pushjobs.log.rules import (
    Lease,
    check_policy,
    check_records,
    fold,
    lease_expired,
    poll_lease,
    session_ms,
)

NOW = 1_000_000


def lease(owner="a", token="t-a", epoch=3, heartbeat_ms=NOW, session=1000):
    return Lease(owner, token, epoch, heartbeat_ms, session)


def poll(current, token="t-b", member="b", group_epoch=3, now=NOW):
    return poll_lease(
        current, group_epoch=group_epoch, member_id=member, token=token, session_ms=500, now_ms=now
    )


def test_a_lease_expires_after_its_owners_session_timeout():
    assert not lease_expired(lease(), NOW + 1000)
    assert lease_expired(lease(), NOW + 1001)


def test_a_released_lease_is_free_at_once():
    assert lease_expired(lease(owner=None, token=None), NOW)


def test_a_heartbeat_far_in_the_future_means_the_clock_went_back():
    assert not lease_expired(lease(), NOW - 1000)
    assert lease_expired(lease(), NOW - 1001)


def test_first_poll_takes_a_free_topic_above_the_groups_highest_epoch():
    assert poll(None, group_epoch=7) == Lease("b", "t-b", 8, NOW, 500)


def test_the_owner_renews_with_its_own_session_and_keeps_its_epoch():
    assert poll(lease(token="t-b", owner="b"), now=NOW + 200) == Lease(
        "b", "t-b", 3, NOW + 200, 500
    )


def test_an_owner_whose_lease_lapsed_unseen_renews_without_a_new_epoch():
    assert poll(lease(token="t-b", owner="b"), now=NOW + 5000).epoch == 3


def test_another_member_waits_while_the_lease_is_live():
    assert poll(lease(), now=NOW + 1000) is None


def test_another_member_takes_an_expired_lease_with_a_new_epoch():
    assert poll(lease(), now=NOW + 1001, group_epoch=5) == Lease("b", "t-b", 6, NOW + 1001, 500)


def test_the_same_member_id_with_another_token_is_another_owner():
    assert poll(lease(owner="b", token="old"), member="b") is None


def test_session_timeouts_must_be_positive():
    assert session_ms(0.0004) == 1
    assert session_ms(1.5) == 1500
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(LogError):
            session_ms(bad)


def test_record_checks():
    check_records("t", [("k", b"1234"), ("k", None)], 4)
    with pytest.raises(RecordTooLarge, match="5 bytes"):
        check_records("t", [("k", b"12345")], 4)
    with pytest.raises(LogError, match="key must be a str"):
        check_records("t", [(b"k", b"v")], 4)
    with pytest.raises(LogError, match="bytes or None"):
        check_records("t", [("k", "text")], 4)


def test_policy_checks():
    check_policy("t", TopicPolicy(retention_ms=0, retention_bytes=0))
    with pytest.raises(LogError, match="retention_bytes"):
        check_policy("t", TopicPolicy(retention_bytes=-1))


def test_fold_keeps_the_latest_value_per_key():
    recs = [
        Record("t", i, k, v, 0)
        for i, (k, v) in enumerate([("a", b"1"), ("a", None), ("b", b"2"), ("b", b"3")])
    ]
    assert {k: r.offset for k, r in fold(recs).items()} == {"b": 3}
