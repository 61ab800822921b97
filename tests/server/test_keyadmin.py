"""Key administration through the API: names, globs, ``all``, one result per name."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from keys.identity import generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.api import methods
from pushjobs.errors import ApiError, KeyFileError
from server.front.keymethods import KeyAdmin


@pytest.fixture
def admin(tmp_path: Path) -> KeyAdmin:
    registry = KeyRegistry(tmp_path / "registry.json")
    for name in ("web-01", "web-02", "db-01"):
        registry.present(name, "node", *_keys(name), auto_accept=False)
    registry.add(generate("alice", "user").public, state=KeyState.ACCEPTED, role="admin")
    return KeyAdmin(SimpleNamespace(registry=registry))


def _keys(name: str) -> tuple[bytes, str]:
    public = generate(name, "node").public
    return public.ed25519_public, public.curve_public


def call(admin: KeyAdmin, method: str, **params):
    return admin.table()[method](params, "alice")


def test_accept_takes_globs_and_reports_each_name(admin: KeyAdmin) -> None:
    results = call(admin, "key.accept", names=["web-*"])["results"]
    assert [(r["name"], r["previous"], r["state"]) for r in results] == [
        ("web-01", "pending", "accepted"),
        ("web-02", "pending", "accepted"),
    ]
    assert admin.registry.get("db-01").state is KeyState.PENDING


def test_accept_all_takes_every_pending_key_and_only_those(admin: KeyAdmin) -> None:
    call(admin, "key.reject", names=["db-01"])
    results = call(admin, "key.accept", all=True)["results"]
    assert sorted(r["name"] for r in results) == ["web-01", "web-02"]
    with pytest.raises(ApiError) as info:
        call(admin, "key.accept", all=True)
    assert info.value.code == methods.NOT_FOUND


def test_a_glob_matching_nothing_is_an_error_not_a_silent_success(admin: KeyAdmin) -> None:
    with pytest.raises(ApiError, match="no key matches 'mail-\\*'") as info:
        call(admin, "key.accept", names=["mail-*"])
    assert info.value.code == methods.NOT_FOUND


def test_an_unknown_exact_name_fails_alone(admin: KeyAdmin) -> None:
    results = call(admin, "key.reject", names=["nope", "db-01"])["results"]
    assert results[0]["name"] == "nope" and not results[0]["ok"] and "nope" in results[0]["error"]
    assert results[1] == {"name": "db-01", "ok": True, "previous": "pending", "state": "rejected"}


def test_delete_removes_denied_entries_too(admin: KeyAdmin) -> None:
    admin.registry.present("web-01", "node", *_keys("web-01"), auto_accept=False)  # denied
    assert len(admin.registry.list(KeyState.DENIED)) == 1
    results = call(admin, "key.delete", names=["web-01"])["results"]
    assert results == [{"name": "web-01", "ok": True, "previous": "pending", "state": "deleted"}]
    assert admin.registry.list(KeyState.DENIED) == []


def test_list_and_show(admin: KeyAdmin) -> None:
    pending = call(admin, "key.list", state="pending", pattern="web-*")["keys"]
    assert [k["name"] for k in pending] == ["web-01", "web-02"]
    shown = call(admin, "key.show", name="alice")
    assert shown["key"]["role"] == "admin" and shown["denied"] == []
    with pytest.raises(ApiError):
        call(admin, "key.list", state="bogus")
    with pytest.raises(KeyFileError, match="only for accept"):
        call(admin, "key.reject", all=True)


def test_add_and_role_through_the_api(admin: KeyAdmin) -> None:
    from keys.identity import b64

    bob = generate("bob", "user").public
    params = {
        "name": "bob",
        "kind": "user",
        "ed25519_public": b64(bob.ed25519_public),
        "curve_public": bob.curve_public,
        "role": "writer",
        "accept": True,
    }
    added = call(admin, "key.add", **params)["key"]
    assert (added["state"], added["role"]) == ("accepted", "writer")
    assert call(admin, "key.role", name="bob", role="reader")["key"]["role"] == "reader"
    with pytest.raises(ApiError, match="not a public key"):
        call(admin, "key.add", **{**params, "name": "eve", "ed25519_public": "AAAA"})


def test_a_standby_over_the_log_shows_keys_but_sends_changes_to_the_leader(
    tmp_path: Path,
) -> None:
    from keys.topicstore import LogStore
    from pushjobs.log.sqlite.sqlite_log import SqliteLog
    from pushjobs.log.topics import KEYS, names

    log = SqliteLog(tmp_path / "log.db")
    try:
        log.create_topic(names().keys, KEYS.policy)
        KeyRegistry(LogStore(log, names().keys)).add(generate("web-01", "node").public)
        standby = KeyRegistry(LogStore(log, names().keys, writable=lambda: False))
        admin = KeyAdmin(SimpleNamespace(registry=standby))
        assert [k["name"] for k in call(admin, "key.list")["keys"]] == ["web-01"]
        for method, params in (
            ("key.accept", {"names": ["web-01"]}),
            ("key.reject", {"names": ["web-01"]}),
            ("key.delete", {"names": ["web-01"]}),
            ("key.role", {"name": "web-01", "role": "admin"}),
            ("key.add", {"name": "x"}),
        ):
            with pytest.raises(ApiError) as info:
                call(admin, method, **params)
            assert info.value.code == methods.NOT_LEADER, method
        assert standby.get("web-01").state is KeyState.PENDING
    finally:
        log.close()
