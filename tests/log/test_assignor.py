"""The embedded backends' assignment of a group's topics (``pushjobs.log.assignor``): pure."""

from __future__ import annotations

import random

from pushjobs.log.assignor import assign, owned_by

TOPICS = ["sched"] + [f"sched.{i}" for i in range(8)]


def _counts(assignment, members):
    return sorted(len(owned_by(assignment, m)) for m in members)


def test_no_member_or_no_topic_assigns_nothing():
    assert assign(TOPICS, []) == {}
    assert assign([], ["a"]) == {}


def test_one_member_owns_everything():
    assert assign(TOPICS, ["a"]) == dict.fromkeys(TOPICS, "a")


def test_every_topic_has_one_owner_and_the_counts_are_even():
    rng = random.Random(17)
    for _ in range(200):
        members = [f"m{rng.randrange(10**6)}" for _ in range(rng.randint(1, 12))]
        topics = TOPICS[: rng.randint(1, len(TOPICS))]
        got = assign(topics, members)
        assert sorted(got) == sorted(topics)
        assert set(got.values()) <= set(members)
        low = len(topics) // len(set(members))
        counts = _counts(got, set(members))
        assert set(counts) <= {low, low + 1}
        assert sum(counts) == len(topics)


def test_every_member_computes_the_same_assignment_whatever_the_order():
    members = ["c", "a", "b", "d"]
    first = assign(TOPICS, members)
    assert assign(list(reversed(TOPICS)), sorted(members)) == first
    assert assign(TOPICS, [*members, "a"]) == first  # a duplicate changes nothing


def test_a_member_that_joins_takes_about_its_share_and_little_else_moves():
    rng = random.Random(5)
    extra_moves = 0
    rounds = 100
    for _ in range(rounds):
        members = [f"m{rng.randrange(10**6)}" for _ in range(3)]
        before = assign(TOPICS, members)
        after = assign(TOPICS, [*members, "new"])
        moved = [t for t in TOPICS if before[t] != after[t]]
        to_new = [t for t in moved if after[t] == "new"]
        assert len(to_new) == len(owned_by(after, "new")) in (2, 3)
        extra_moves += len(moved) - len(to_new)
    # Between old members: under one topic per join on average (the counts' price).
    assert extra_moves / rounds < 1.0
