from __future__ import annotations

import pytest

from keys.identity import generate
from keys.registry import TRANSITIONS, Action, KeyRegistry, KeyState, transition
from pushjobs.errors import KeyFileError, KeyStateError, UnknownIdentity

NOW = 1_700_000_000_000


@pytest.fixture
def registry(tmp_path):
    return KeyRegistry(tmp_path / "registry.json")


def pub(name="web-01", kind="node"):
    return generate(name, kind).public


@pytest.mark.parametrize(("state", "action"), sorted(TRANSITIONS), ids=str)
def test_table_row(registry, state, action):
    entry = registry.add(pub(), NOW, state=state)
    apply = registry.accept if action is Action.ACCEPT else registry.reject
    (changed,) = apply([entry.name], NOW + 1)
    assert changed.state is TRANSITIONS[(state, action)]
    assert registry.get(entry.name).state is changed.state
    assert changed.updated_ms == NOW + 1


ILLEGAL = [
    (s, a)
    for s in KeyState
    for a in Action
    if (s, a) not in TRANSITIONS and s is not KeyState.DENIED
]


@pytest.mark.parametrize(("state", "action"), ILLEGAL, ids=str)
def test_illegal_move_raises_and_changes_nothing(registry, state, action):
    registry.add(pub(), NOW, state=state)
    before = registry.path.read_bytes()
    apply = registry.accept if action is Action.ACCEPT else registry.reject
    with pytest.raises(KeyStateError, match=f"cannot {action} a key that is {state}"):
        apply(["web-01"], NOW + 1)
    assert registry.path.read_bytes() == before


def test_transition_function_covers_denied():
    with pytest.raises(KeyStateError):
        transition(KeyState.DENIED, Action.ACCEPT)


def test_batch_with_one_bad_name_changes_nothing(registry):
    registry.add(pub("a"), NOW)
    with pytest.raises(UnknownIdentity):
        registry.accept(["a", "zz"], NOW)
    assert registry.get("a").state is KeyState.PENDING


def test_present_unknown_is_pending_or_auto_accepted(registry):
    assert registry.present(pub("a"), NOW, auto_accept=False) is KeyState.PENDING
    assert registry.present(pub("b"), NOW, auto_accept=True) is KeyState.ACCEPTED


def test_present_known_key_returns_its_state_unchanged(registry):
    key = pub("a")
    registry.present(key, NOW, auto_accept=False)
    registry.accept(["a"], NOW)
    assert registry.present(key, NOW + 5, auto_accept=False) is KeyState.ACCEPTED
    assert len(registry.entries()) == 1


def test_present_other_key_for_known_name_is_denied_and_original_kept(registry):
    original = pub("a")
    registry.present(original, NOW, auto_accept=True)
    impostor = pub("a")
    assert registry.present(impostor, NOW, auto_accept=True) is KeyState.DENIED
    assert registry.present(impostor, NOW, auto_accept=True) is KeyState.DENIED  # recorded once
    assert registry.get("a").fingerprint == original.fingerprint
    assert registry.get("a").state is KeyState.ACCEPTED
    denied = registry.entries(KeyState.DENIED)
    assert [e.fingerprint for e in denied] == [impostor.fingerprint]


def test_is_authorized_only_for_accepted_matching_key(registry):
    key = pub("a")
    registry.present(key, NOW, auto_accept=False)
    assert not registry.is_authorized("a", key.fingerprint)
    registry.accept(["a"], NOW)
    assert registry.is_authorized("a", key.fingerprint)
    assert not registry.is_authorized("a", pub("a").fingerprint)
    registry.reject(["a"], NOW)  # revocation
    assert not registry.is_authorized("a", key.fingerprint)
    assert not registry.is_authorized("nobody", key.fingerprint)


def test_delete_removes_denied_entries_too(registry):
    registry.present(pub("a"), NOW, auto_accept=True)
    registry.present(pub("a"), NOW, auto_accept=True)
    assert len(registry.entries()) == 2
    removed = registry.delete(["a"])
    assert len(removed) == 2 and registry.entries() == []
    with pytest.raises(UnknownIdentity):
        registry.delete(["a"])


def test_users_get_a_role(registry):
    entry = registry.add(pub("alice", "user"), NOW, state=KeyState.ACCEPTED)
    assert entry.role == "reader"
    assert registry.set_role("alice", "admin", NOW).role == "admin"
    with pytest.raises(KeyFileError, match="unknown role"):
        registry.set_role("alice", "root", NOW)
    registry.add(pub("n1"), NOW)
    with pytest.raises(KeyStateError, match="only users have roles"):
        registry.set_role("n1", "admin", NOW)


def test_add_twice_is_refused(registry):
    registry.add(pub("a"), NOW)
    with pytest.raises(KeyStateError, match="already registered"):
        registry.add(pub("a"), NOW)


def test_two_handles_see_each_others_changes(tmp_path):
    path = tmp_path / "registry.json"
    server, admin = KeyRegistry(path), KeyRegistry(path)
    key = pub("a")
    server.present(key, NOW, auto_accept=False)
    assert admin.get("a").state is KeyState.PENDING
    admin.accept(["a"], NOW)
    assert server.is_authorized("a", key.fingerprint)
    assert server.by_curve_key(key.curve_public).name == "a"


def test_persists_across_reopen(tmp_path):
    path = tmp_path / "registry.json"
    KeyRegistry(path).add(pub("a"), NOW, state=KeyState.ACCEPTED)
    assert KeyRegistry(path).get("a").state is KeyState.ACCEPTED


@pytest.mark.parametrize(
    "content",
    [
        b"garbage",
        b"[]",
        b'{"format": "other", "entries": []}',
        b'{"format": "pushjobs-key-registry/1"}',
    ],
)
def test_corrupt_registry_is_an_error_never_a_reset(tmp_path, content):
    path = tmp_path / "registry.json"
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match="corrupt key registry") as info:
        KeyRegistry(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content


def test_tampered_fingerprint_is_corrupt(tmp_path):
    path = tmp_path / "registry.json"
    KeyRegistry(path).add(pub("a"), NOW)
    text = path.read_text().replace('"fingerprint": "SHA256:', '"fingerprint": "SHA256:x')
    path.write_text(text)
    with pytest.raises(KeyFileError, match="fingerprint of a does not match"):
        KeyRegistry(path)
