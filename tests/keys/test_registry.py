from __future__ import annotations

import errno
import os
import subprocess
import sys

import orjson
import pytest

from keys import atomic
from keys.filestore import FORMAT
from keys.identity import generate
from keys.registry import KeyRegistry, KeyState
from pushjobs.clock import FakeClock
from pushjobs.errors import KeyFileError, KeyStateError, UnknownIdentity

NOW = 1_700_000_000_000


@pytest.fixture
def clock():
    return FakeClock(wall_ms=NOW)


@pytest.fixture
def registry(tmp_path, clock):
    return KeyRegistry(tmp_path / "registry.json", clock=clock)


def pub(name="web-01", kind="node"):
    return generate(name, kind).public


def present(registry, public, *, auto_accept=False, now_ms=None):
    return registry.present(
        public.name,
        public.kind,
        public.ed25519_public,
        public.curve_public,
        auto_accept=auto_accept,
        now_ms=now_ms,
    )


# --- present ------------------------------------------------------------------------------


def test_present_unknown_is_pending_or_auto_accepted(registry):
    assert present(registry, pub("a")) is KeyState.PENDING
    assert present(registry, pub("b"), auto_accept=True) is KeyState.ACCEPTED
    assert registry.get("a").state is KeyState.PENDING
    assert registry.get("b").state is KeyState.ACCEPTED
    assert registry.get("a").created_ms == NOW


@pytest.mark.parametrize("state", [KeyState.PENDING, KeyState.ACCEPTED, KeyState.REJECTED])
def test_present_known_key_returns_its_state_and_writes_nothing(registry, state):
    key = pub("a")
    registry.add(key, state=state)
    before = os.stat(registry.path)
    assert present(registry, key, auto_accept=True) is state
    after = os.stat(registry.path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert len(registry.list()) == 1


def test_present_other_key_for_known_name_is_denied_and_original_kept(registry, clock):
    original = pub("a")
    present(registry, original, auto_accept=True)
    before = registry.get("a")
    impostor = pub("a")
    clock.advance(5)
    assert present(registry, impostor, auto_accept=True) is KeyState.DENIED
    assert present(registry, impostor, auto_accept=True) is KeyState.DENIED  # recorded once
    assert registry.get("a") == before
    (denied,) = registry.list(KeyState.DENIED)
    assert (denied.name, denied.fingerprint) == ("a", impostor.fingerprint)
    assert denied.created_ms == NOW + 5000
    assert registry.is_authorized("a", original.fingerprint)
    assert not registry.is_authorized("a", impostor.fingerprint)


def test_present_same_ed25519_key_with_another_curve_key_is_denied(registry):
    original = generate("a", "node").public
    present(registry, original, auto_accept=True)
    other_curve = generate("a", "node").public.curve_public
    got = registry.present(
        "a", "node", original.ed25519_public, other_curve, auto_accept=True, now_ms=NOW
    )
    assert got is KeyState.DENIED
    assert registry.by_curve_key(other_curve) is None
    assert registry.by_curve_key(original.curve_public).name == "a"


def test_impostor_keys_fold_into_one_denied_entry_per_name(registry):
    present(registry, pub("a"))
    tries = [pub("a") for _ in range(5)]
    for key in tries:
        assert present(registry, key) is KeyState.DENIED
    assert present(registry, tries[-1]) is KeyState.DENIED  # the last one: no new attempt
    [denied] = registry.list(KeyState.DENIED)
    assert denied.name == "a" and denied.fingerprint == tries[-1].fingerprint
    assert denied.attempts == 5
    assert len(registry.list()) == 2


def test_record_writes_many_presentations_at_once(registry, tmp_path):
    from keys.registry import Presented

    original = pub("a")
    present(registry, original)
    before = registry.path.stat().st_mtime_ns
    states = registry.record(
        [Presented(pub("b")), Presented(pub("c"), auto_accept=True), Presented(pub("a"))]
    )
    assert states == [KeyState.PENDING, KeyState.ACCEPTED, KeyState.DENIED]
    assert registry.path.stat().st_mtime_ns > before
    assert {e.name: e.state for e in registry.list() if e.state is not KeyState.DENIED} == {
        "a": KeyState.PENDING,
        "b": KeyState.PENDING,
        "c": KeyState.ACCEPTED,
    }


def test_a_registry_written_before_attempts_existed_still_loads(registry):
    import orjson

    present(registry, pub("a"))
    doc = orjson.loads(registry.path.read_bytes())
    for item in doc["entries"]:
        del item["attempts"]
    registry.path.write_bytes(orjson.dumps(doc))
    from keys.registry import KeyRegistry

    [entry] = KeyRegistry(registry.path).list()
    assert entry.name == "a" and entry.attempts == 1


def test_a_pending_name_with_another_key_is_denied_too(registry):
    present(registry, pub("a"))
    assert present(registry, pub("a")) is KeyState.DENIED
    assert registry.get("a").state is KeyState.PENDING


def test_present_checks_what_it_is_given(registry):
    with pytest.raises(KeyFileError, match="invalid name"):
        registry.present("-a", "node", b"x" * 32, pub().curve_public, auto_accept=True)
    with pytest.raises(KeyFileError, match="invalid kind"):
        registry.present("a", "robot", b"x" * 32, pub().curve_public, auto_accept=True)
    with pytest.raises(KeyFileError, match="32 bytes"):
        registry.present("a", "node", b"x", pub().curve_public, auto_accept=True)
    assert registry.list() == []


# --- authorisation ------------------------------------------------------------------------


def test_is_authorized_only_for_accepted_matching_key(registry):
    key = pub("a")
    present(registry, key)
    assert not registry.is_authorized("a", key.fingerprint)  # pending
    registry.accept(["a"])
    assert registry.is_authorized("a", key.fingerprint)
    assert not registry.is_authorized("a", pub("a").fingerprint)
    registry.reject(["a"])  # a revocation
    assert not registry.is_authorized("a", key.fingerprint)
    assert not registry.is_authorized("nobody", key.fingerprint)


# --- admin moves --------------------------------------------------------------------------


def test_a_batch_with_one_bad_name_changes_nothing(registry):
    registry.add(pub("a"))
    registry.add(pub("b"), state=KeyState.ACCEPTED)
    with pytest.raises(UnknownIdentity, match="no key named 'zz'"):
        registry.accept(["a", "zz"])
    with pytest.raises(KeyStateError):
        registry.accept(["a", "b"])
    assert registry.get("a").state is KeyState.PENDING
    with pytest.raises(UnknownIdentity):
        registry.delete(["a", "zz"])
    assert registry.find("a") is not None


def test_repeated_names_in_a_batch_count_once(registry):
    registry.add(pub("a"))
    (entry,) = registry.accept(["a", "a"])
    assert entry.state is KeyState.ACCEPTED


def test_timestamps_come_from_the_clock_or_now_ms(registry, clock):
    registry.add(pub("a"))
    clock.advance(2)
    assert registry.accept(["a"])[0].updated_ms == NOW + 2000
    assert registry.reject(["a"], now_ms=42)[0].updated_ms == 42
    assert registry.get("a").created_ms == NOW


def test_delete_removes_denied_entries_too(registry):
    present(registry, pub("a"), auto_accept=True)
    present(registry, pub("a"), auto_accept=True)
    present(registry, pub("b"))
    assert len(registry.list()) == 3
    removed = registry.delete(["a"])
    assert {e.state for e in removed} == {KeyState.ACCEPTED, KeyState.DENIED}
    assert [e.name for e in registry.list()] == ["b"]
    with pytest.raises(UnknownIdentity):
        registry.delete(["a"])


def test_after_delete_the_name_can_enrol_again(registry):
    present(registry, pub("a"), auto_accept=True)
    registry.delete(["a"])
    new = pub("a")
    assert present(registry, new) is KeyState.PENDING
    assert registry.get("a").fingerprint == new.fingerprint


def test_users_get_a_role_and_others_do_not(registry):
    entry = registry.add(pub("alice", "user"), state=KeyState.ACCEPTED)
    assert entry.role == "reader"
    assert registry.set_role("alice", "admin").role == "admin"
    assert registry.get("alice").role == "admin"
    assert registry.add(pub("bob", "user"), role="writer").role == "writer"
    with pytest.raises(KeyFileError, match="unknown role"):
        registry.set_role("alice", "root")
    with pytest.raises(KeyFileError, match="only users have roles"):
        registry.add(pub("n1"), role="admin")
    registry.add(pub("n1"))
    assert registry.get("n1").role is None
    with pytest.raises(KeyFileError, match="only users have roles"):
        registry.set_role("n1", "admin")
    with pytest.raises(UnknownIdentity):
        registry.set_role("ghost", "admin")


def test_add_twice_or_denied_is_refused(registry):
    registry.add(pub("a"))
    with pytest.raises(KeyStateError, match="already registered"):
        registry.add(pub("a"))
    with pytest.raises(KeyStateError, match="only recorded when a node presents"):
        registry.add(pub("b"), state=KeyState.DENIED)


def test_list_filters_by_state(registry):
    registry.add(pub("a"))
    registry.add(pub("b"), state=KeyState.ACCEPTED)
    assert [e.name for e in registry.list("accepted")] == ["b"]
    assert [e.name for e in registry.list(KeyState.PENDING)] == ["a"]
    with pytest.raises(KeyFileError, match="unknown key state"):
        registry.list("bogus")


def test_get_unknown(registry):
    with pytest.raises(UnknownIdentity, match=f"no key named 'x' in {registry.path}"):
        registry.get("x")
    assert registry.find("x") is None


# --- storage ------------------------------------------------------------------------------


def test_two_handles_see_each_others_changes(tmp_path):
    path = tmp_path / "registry.json"
    server, admin = KeyRegistry(path), KeyRegistry(path)
    key = pub("a")
    present(server, key)
    assert admin.get("a").state is KeyState.PENDING
    admin.accept(["a"])
    assert server.is_authorized("a", key.fingerprint)
    admin.reject(["a"])
    assert not server.is_authorized("a", key.fingerprint)
    admin.delete(["a"])
    assert server.find("a") is None


def test_same_size_rewrites_in_one_clock_tick_are_still_seen(tmp_path):
    # accepted/rejected have the same length and now_ms is fixed, so each rewrite has
    # the same size; only a strictly newer mtime tells the reader the file changed.
    path = tmp_path / "registry.json"
    writer, reader = KeyRegistry(path), KeyRegistry(path)
    writer.add(pub("a"), state=KeyState.ACCEPTED, now_ms=NOW)
    sizes, mtimes = set(), []
    for _ in range(20):
        writer.reject(["a"], now_ms=NOW)
        assert reader.get("a").state is KeyState.REJECTED
        writer.accept(["a"], now_ms=NOW)
        assert reader.get("a").state is KeyState.ACCEPTED
        st = os.stat(path)
        sizes.add(st.st_size)
        mtimes.append(st.st_mtime_ns)
    assert len(sizes) == 1
    assert mtimes == sorted(set(mtimes))


def test_every_write_moves_mtime_strictly_forward(tmp_path):
    # A coarse or stepped-back file system clock must not give two versions one stamp.
    path = tmp_path / "registry.json"
    registry = KeyRegistry(path)
    registry.add(pub("a"), now_ms=NOW)
    ahead_ns = os.stat(path).st_mtime_ns + 3_600 * 10**9
    os.utime(path, ns=(ahead_ns, ahead_ns))
    registry.accept(["a"], now_ms=NOW)
    assert os.stat(path).st_mtime_ns == ahead_ns + 1
    registry.reject(["a"], now_ms=NOW)
    assert os.stat(path).st_mtime_ns == ahead_ns + 2


def test_persists_across_reopen_with_a_readable_format(tmp_path):
    path = tmp_path / "registry.json"
    KeyRegistry(path).add(pub("a"), state=KeyState.ACCEPTED, now_ms=NOW)
    assert KeyRegistry(path).get("a").state is KeyState.ACCEPTED
    doc = orjson.loads(path.read_bytes())
    assert doc["format"] == FORMAT
    assert doc["entries"][0]["state"] == "accepted"
    assert os.stat(path).st_mode & 0o077 == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["registry.json", "registry.json.lock"]


def test_a_failed_write_changes_nothing(registry, monkeypatch):
    registry.add(pub("a"))
    before = registry.path.read_bytes()

    def broken_fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", broken_fsync)
    with pytest.raises(KeyFileError, match="No space left"):
        registry.accept(["a"])
    monkeypatch.undo()
    assert registry.path.read_bytes() == before
    assert registry.get("a").state is KeyState.PENDING
    assert sorted(p.name for p in registry.path.parent.iterdir()) == [
        "registry.json",
        "registry.json.lock",
    ]


def test_concurrent_writers_in_other_processes_lose_nothing(tmp_path):
    path = tmp_path / "registry.json"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from keys.identity import generate\n"
        "from keys.registry import KeyRegistry\n"
        "reg = KeyRegistry(Path(sys.argv[1]))\n"
        "for i in range(15):\n"
        "    p = generate(f'{sys.argv[2]}-{i}', 'node').public\n"
        "    reg.present(p.name, p.kind, p.ed25519_public, p.curve_public, auto_accept=False)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(path), f"w{n}"], stderr=subprocess.PIPE)
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    assert len(KeyRegistry(path).list(KeyState.PENDING)) == 60


CORRUPT = {
    "not-json": b"garbage",
    "empty": b"",
    "array": b"[]",
    "other-format": b'{"format": "other", "entries": []}',
    "no-entries": b'{"format": "pushjobs-key-registry/1"}',
    "entry-not-object": b'{"format": "pushjobs-key-registry/1", "entries": [1]}',
}


@pytest.mark.parametrize("content", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_registry_is_an_error_never_a_reset(tmp_path, content):
    path = tmp_path / "registry.json"
    path.write_bytes(content)
    with pytest.raises(KeyFileError, match="corrupt key registry") as info:
        KeyRegistry(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content


def _tamper(path, index, **changes):
    doc = orjson.loads(path.read_bytes())
    doc["entries"][index].update(changes)
    for key, value in changes.items():
        if value is ...:
            del doc["entries"][index][key]
    path.write_bytes(orjson.dumps(doc))


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"fingerprint": "SHA256:x"}, "fingerprint does not match"),
        ({"state": "limbo"}, "unknown state"),
        ({"kind": "robot"}, "invalid kind"),
        ({"role": "admin"}, "only users have roles"),
        ({"created_ms": "yesterday"}, "'created_ms' must be an integer"),
        ({"updated_ms": True}, "'updated_ms' must be an integer"),
        ({"name": "../x"}, "invalid name"),
        ({"curve_public": "short"}, "curve_public"),
        ({"state": ...}, "exactly"),
        ({"extra": 1}, "exactly"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "-".join(v),
)
def test_tampered_entries_are_corrupt(tmp_path, changes, needle):
    path = tmp_path / "registry.json"
    KeyRegistry(path).add(pub("a"), now_ms=NOW)
    _tamper(path, 0, **changes)
    with pytest.raises(KeyFileError, match=needle) as info:
        KeyRegistry(path)
    assert str(info.value).startswith(f"{path}: corrupt key registry: entry 0: ")


def test_a_file_corrupted_under_a_running_reader_is_reported(tmp_path):
    path = tmp_path / "registry.json"
    registry = KeyRegistry(path)
    registry.add(pub("a"))
    path.write_bytes(b"{")
    with pytest.raises(KeyFileError, match="corrupt key registry"):
        registry.list()
    with pytest.raises(KeyFileError, match="corrupt key registry"):
        registry.add(pub("b"))
    assert path.read_bytes() == b"{"


def test_add_many_is_one_write_idempotent_and_all_or_nothing(registry):
    publics = [pub(f"n{i}") for i in range(3)]
    assert registry.add_many(publics, state=KeyState.ACCEPTED) == 3
    stamp = registry.path.stat().st_mtime_ns
    assert registry.add_many(publics, state=KeyState.ACCEPTED) == 0  # same keys: nothing to do
    assert registry.path.stat().st_mtime_ns == stamp
    assert [registry.get(f"n{i}").state for i in range(3)] == [KeyState.ACCEPTED] * 3
    impostor = pub("n1")
    with pytest.raises(KeyStateError):
        registry.add_many([pub("n9"), impostor])
    assert registry.find("n9") is None  # the batch changed nothing


def test_lookups_follow_changes_of_the_file(registry):
    first = pub("web-01")
    registry.add(first, state=KeyState.ACCEPTED)
    assert registry.find("web-01").state is KeyState.ACCEPTED
    assert registry.by_curve_key(first.curve_public).name == "web-01"
    other = KeyRegistry(registry.path)  # another process's view, e.g. the CLI
    other.reject(["web-01"])
    assert registry.find("web-01").state is KeyState.REJECTED
    other.delete(["web-01"])
    assert registry.find("web-01") is None
    assert registry.by_curve_key(first.curve_public) is None
