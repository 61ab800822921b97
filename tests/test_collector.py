"""The daemons' garbage-collector policy: survivors frozen, cycles still collected."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pushjobs import collector


@pytest.fixture
def tuned() -> Iterator[None]:
    collector.tune()
    try:
        yield
    finally:
        collector.untune()


class Node:
    def __init__(self) -> None:
        self.peer: Node | None = None


def cycle() -> None:
    a, b = Node(), Node()
    a.peer, b.peer = b, a


def test_untuned_stats_are_empty() -> None:
    assert collector.stats() == {}


def test_survivors_of_a_full_collection_are_frozen_and_counted(tuned: None) -> None:
    assert gc.get_threshold() == (collector.GEN0, collector.GEN1, collector.GEN2)
    long_lived = [{"node": i} for i in range(1000)]
    gc.collect()
    stats = collector.stats()
    assert stats["collections"][2] == 1
    assert stats["frozen_objects"] >= len(long_lived)
    # The next full collection will not walk them: they left the oldest generation.
    assert not any(o is long_lived for o in gc.get_objects(generation=2))
    assert stats["pause_max_ms"][2] >= 0.0 and stats["pause_total_ms"][2] >= 0.0


def test_a_cycle_made_after_a_freeze_is_still_collected(tuned: None) -> None:
    gc.collect()  # freezes whatever exists now
    cycle()
    assert gc.collect() >= 2  # the two nodes of the new cycle


def test_tune_is_idempotent_and_untune_restores_defaults() -> None:
    collector.tune()
    collector.tune()
    try:
        assert sum(isinstance(cb, collector._Watch) for cb in gc.callbacks) == 1
    finally:
        collector.untune()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
    assert collector.stats() == {}


def test_stats_never_walk_the_frozen_heap(tuned: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """server.info asks every second; counting the frozen objects walks all of them
    (millions at 50,000 nodes: about 2 % of the server's CPU in a job), so the count is
    taken once, when they are frozen."""
    kept = [{"node": i} for i in range(1000)]
    gc.collect()
    frozen = collector.stats()["frozen_objects"]
    assert frozen >= len(kept)

    def walked() -> int:
        raise AssertionError("stats() walked the frozen heap")

    monkeypatch.setattr(gc, "get_freeze_count", walked)
    assert collector.stats()["frozen_objects"] == frozen
