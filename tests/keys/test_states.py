"""One test per row of the key state table, legal and illegal, pure and through the registry."""

from __future__ import annotations

import itertools

import pytest

from keys.identity import generate
from keys.keystates import TRANSITIONS, Action, KeyState, transition
from keys.registry import KeyRegistry
from pushjobs.errors import KeyStateError

NOW = 1_700_000_000_000
ALL = list(itertools.product(KeyState, Action))
LEGAL = [pair for pair in ALL if pair in TRANSITIONS]
ILLEGAL = [pair for pair in ALL if pair not in TRANSITIONS]


def ids(pair):
    return f"{pair[0]}-{pair[1]}"


def test_the_table_is_the_documented_one():
    assert dict(TRANSITIONS) == {
        (KeyState.PENDING, Action.ACCEPT): KeyState.ACCEPTED,
        (KeyState.REJECTED, Action.ACCEPT): KeyState.ACCEPTED,
        (KeyState.PENDING, Action.REJECT): KeyState.REJECTED,
        (KeyState.ACCEPTED, Action.REJECT): KeyState.REJECTED,
        **{(state, Action.DELETE): None for state in KeyState},
    }


@pytest.mark.parametrize("pair", LEGAL, ids=ids)
def test_legal_row(pair):
    assert transition(*pair) is TRANSITIONS[pair]


@pytest.mark.parametrize("pair", ILLEGAL, ids=ids)
def test_illegal_row(pair):
    state, action = pair
    with pytest.raises(KeyStateError, match=f"cannot {action} a key that is {state}"):
        transition(state, action)


def registry_with(tmp_path, state):
    """A registry whose entry for "n" is in ``state`` (denied: an impostor's entry)."""
    registry = KeyRegistry(tmp_path / "registry.json")
    if state is KeyState.DENIED:
        registry.add(generate("n", "node").public, state=KeyState.ACCEPTED, now_ms=NOW)
        impostor = generate("n", "node").public
        got = registry.present(
            "n", "node", impostor.ed25519_public, impostor.curve_public, auto_accept=True
        )
        assert got is KeyState.DENIED
    else:
        registry.add(generate("n", "node").public, state=state, now_ms=NOW)
    return registry


def apply(registry, action):
    if action is Action.DELETE:
        return registry.delete(["n"])
    move = registry.accept if action is Action.ACCEPT else registry.reject
    return move(["n"], now_ms=NOW + 1)


@pytest.mark.parametrize("pair", LEGAL, ids=ids)
def test_legal_row_through_the_registry(tmp_path, pair):
    state, action = pair
    registry = registry_with(tmp_path, state)
    changed = apply(registry, action)
    if action is Action.DELETE:
        assert state in {e.state for e in changed}
        assert registry.find("n") is None and registry.list() == []
    else:
        (entry,) = changed
        assert entry.state is TRANSITIONS[pair] is registry.get("n").state
        assert entry.updated_ms == NOW + 1 and entry.created_ms == NOW


@pytest.mark.parametrize("pair", [p for p in ILLEGAL if p[0] is not KeyState.DENIED], ids=ids)
def test_illegal_row_through_the_registry_changes_nothing(tmp_path, pair):
    state, action = pair
    registry = registry_with(tmp_path, state)
    before = registry.path.read_bytes()
    with pytest.raises(KeyStateError, match=f"cannot {action} a key that is {state}"):
        apply(registry, action)
    assert registry.path.read_bytes() == before
    assert registry.get("n").state is state


@pytest.mark.parametrize("action", [Action.ACCEPT, Action.REJECT])
def test_a_denied_entry_is_out_of_reach_of_accept_and_reject(tmp_path, action):
    # By name, accept and reject act on the name's own entry; the impostor's stays denied.
    registry = registry_with(tmp_path, KeyState.DENIED)
    denied_before = registry.list(KeyState.DENIED)
    if action is Action.ACCEPT:
        registry.reject(["n"], now_ms=NOW)
    apply(registry, action)
    assert registry.list(KeyState.DENIED) == denied_before
