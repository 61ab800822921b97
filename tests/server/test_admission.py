"""Admission: unknown keys are queued, capped, folded, and written in batches.

A real registry file in a temporary directory; no sockets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keys.identity import PublicIdentity, generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import KeyFileError
from server.front.admission import FLUSH_EVERY_S, Admission, Refused


def key(name: str) -> PublicIdentity:
    return generate(name, "node").public


@pytest.fixture
def registry(tmp_path: Path) -> KeyRegistry:
    return KeyRegistry(tmp_path / "registry.json")


def admission(registry: KeyRegistry, **kw) -> Admission:
    settings = {"auto_accept": False, "max_pending": 1000, "max_per_source": 100} | kw
    return Admission(registry, **settings)


def test_new_keys_are_answered_at_once_and_written_together(registry) -> None:
    adm = admission(registry)
    keys = [key(f"n{i}") for i in range(50)]
    assert all(adm.decide(k, "10.0.0.1", 0.0) is KeyState.PENDING for k in keys)
    assert registry.list() == [] and adm.writes == 0
    adm.flush(0.5)  # the first flush is due at once
    assert adm.writes == 1 and len(registry.list(KeyState.PENDING)) == 50
    # Known now: asking again writes nothing.
    assert adm.decide(keys[0], "10.0.0.1", 0.6) is KeyState.PENDING
    assert adm.queued == 0


def test_pending_writes_wait_for_the_flush_interval(registry) -> None:
    adm = admission(registry)
    adm.decide(key("a"), "s", 0.0)
    adm.flush(0.0)
    adm.decide(key("b"), "s", 0.1)
    adm.flush(0.2)
    assert adm.writes == 1 and adm.queued == 1
    adm.flush(FLUSH_EVERY_S)
    assert adm.writes == 2 and {e.name for e in registry.list()} == {"a", "b"}


def test_an_auto_accepted_key_is_written_at_the_end_of_its_turn(registry) -> None:
    adm = admission(registry, auto_accept=True)
    adm.decide(key("a"), "s", 0.0)
    adm.flush(0.0)
    adm.decide(key("b"), "s", 0.1)
    adm.flush(0.1)  # not due by time, but a node was admitted
    assert adm.writes == 2 and registry.get("b").state is KeyState.ACCEPTED


def test_pending_keys_are_capped_in_total(registry) -> None:
    adm = admission(registry, max_pending=3)
    for name in ("a", "b"):
        adm.decide(key(name), "x", 0.0)
    adm.flush(0.0)
    assert adm.decide(key("c"), "y", 0.1) is KeyState.PENDING
    refused = adm.decide(key("d"), "z", 0.2)
    assert isinstance(refused, Refused) and "3 keys are pending" in refused.reason
    adm.flush(5.0)
    assert {e.name for e in registry.list()} == {"a", "b", "c"}
    registry.accept(["a"])  # an admin frees a slot
    assert adm.decide(key("d"), "z", 5.1) is KeyState.PENDING
    assert adm.refused == 1


def test_pending_keys_are_capped_per_source(registry) -> None:
    adm = admission(registry, max_per_source=2)
    assert adm.decide(key("a"), "10.0.0.9", 0.0) is KeyState.PENDING
    assert adm.decide(key("b"), "10.0.0.9", 0.0) is KeyState.PENDING
    refused = adm.decide(key("c"), "10.0.0.9", 0.0)
    assert isinstance(refused, Refused) and "10.0.0.9" in refused.reason
    assert adm.decide(key("c"), "10.0.0.10", 0.0) is KeyState.PENDING  # another host
    adm.flush(0.0)
    registry.reject(["a"])
    assert adm.decide(key("d"), "10.0.0.9", 1.0) is KeyState.PENDING


def test_impostor_keys_under_a_known_name_fold_into_one_entry(registry) -> None:
    adm = admission(registry)
    real = key("web-01")
    adm.decide(real, "s", 0.0)
    adm.flush(0.0)
    registry.accept(["web-01"])
    for _ in range(600):
        assert adm.decide(key("web-01"), "s", 0.5) is KeyState.DENIED
    assert adm.queued == 1  # folded before it is even written
    adm.flush(FLUSH_EVERY_S)
    [denied] = registry.list(KeyState.DENIED)
    assert denied.attempts == 600
    assert registry.get("web-01").state is KeyState.ACCEPTED
    assert len(registry.list()) == 2


def test_a_second_key_for_a_name_queued_in_the_same_batch_is_denied(registry) -> None:
    adm = admission(registry)
    assert adm.decide(key("n"), "s", 0.0) is KeyState.PENDING
    assert adm.decide(key("n"), "s", 0.0) is KeyState.DENIED
    adm.flush(0.0)
    assert registry.get("n").state is KeyState.PENDING
    assert len(registry.list(KeyState.DENIED)) == 1


def test_a_registry_that_cannot_be_written_loses_the_batch_not_the_server(
    registry, monkeypatch
) -> None:
    adm = admission(registry)
    adm.decide(key("a"), "s", 0.0)

    def full_disk(*args, **kwargs):
        raise KeyFileError("registry.json: cannot write: No space left on device")

    monkeypatch.setattr(registry, "record", full_disk)
    adm.flush(0.0)
    assert adm.failed_writes == 1 and adm.queued == 0
    monkeypatch.undo()
    assert adm.decide(key("a"), "s", 2.0) is KeyState.PENDING  # asked again: queued again
    adm.flush(2.0)
    assert registry.get("a").state is KeyState.PENDING
