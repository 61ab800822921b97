"""The lease rules the embedded backends share (pure, one test per rule)."""

from __future__ import annotations

from pushjobs.log.leases import Claimant, Lease, lease_expired, poll_lease

NOW = 1_000_000


def lease(owner="a", token="t-a", epoch=3, heartbeat_ms=NOW, session=1000):
    return Lease(owner, token, epoch, heartbeat_ms, session)


def poll(current, token="t-b", member="b", group_epoch=3, now=NOW):
    return poll_lease(current, Claimant(member, token, 500), group_epoch=group_epoch, now_ms=now)


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


def test_a_member_id_may_name_its_process():
    from pushjobs.log.leases import process_of

    assert process_of("server:abc@host-1/4242") == ("host-1", 4242)
    assert process_of("server:abc") is None
    assert process_of("a@b") is None
    assert process_of("a@host/notapid") is None


def test_a_live_lease_whose_owner_is_gone_is_taken_at_once():
    taken = poll_lease(
        lease(), Claimant("b", "t-b", 500), group_epoch=3, now_ms=NOW, owner_gone=True
    )
    assert taken is not None and (taken.owner, taken.epoch) == ("b", 4)
    assert poll(lease()) is None  # the same lease, its owner alive: wait
