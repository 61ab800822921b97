from __future__ import annotations

import errno
import os
import stat

import pytest

from keys import atomic, files
from keys.identity import generate
from pushjobs.errors import InsecureKeyFile, KeyFileError


def mode_of(path):
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask():
    def set_umask(value):
        previous.append(os.umask(value))

    previous = []
    yield set_umask
    for value in reversed(previous):
        os.umask(value)


def test_save_and_load_round_trip(tmp_path):
    identity = generate("web-01", "node")
    key, pub = files.save(identity, tmp_path / "keys")
    assert (key.name, pub.name) == ("web-01.key", "web-01.pub")
    assert files.load_private(key) == identity
    assert files.load_public(pub) == identity.public
    assert key.read_text().startswith("# pushjobs PRIVATE key of node web-01")
    assert pub.read_text().startswith("# pushjobs public key of node web-01")
    assert identity.public.fingerprint in pub.read_text()
    assert identity.curve_secret not in pub.read_text()
    assert sorted(p.name for p in key.parent.iterdir()) == ["web-01.key", "web-01.pub"]


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o077])
def test_modes_do_not_depend_on_the_umask(tmp_path, umask, mask):
    umask(mask)
    key, pub = files.save(generate("a", "node"), tmp_path)
    assert mode_of(key) == 0o600
    assert mode_of(pub) == 0o644


def test_private_file_is_created_0600_from_the_first_instant(tmp_path, monkeypatch):
    opened = []
    real_open = os.open

    def spy(path, flags, mode=0o777, **kwargs):
        opened.append((str(path), flags, mode))
        return real_open(path, flags, mode, **kwargs)

    monkeypatch.setattr(atomic.os, "open", spy)
    files.save(generate("a", "node"), tmp_path)
    creates = [(p, f, m) for p, f, m in opened if f & os.O_CREAT]
    key_tmp = [c for c in creates if ".a.key." in c[0]]
    assert len(key_tmp) == 1
    _, flags, mode = key_tmp[0]
    assert flags & os.O_EXCL and mode == 0o600


def test_refuses_to_overwrite_without_force(tmp_path):
    first = generate("a", "user")
    files.save(first, tmp_path)
    with pytest.raises(KeyFileError, match=r"a\.key: already exists"):
        files.save(generate("a", "user"), tmp_path)
    assert files.load_private(tmp_path / "a.key") == first
    second = generate("a", "user")
    files.save(second, tmp_path, force=True)
    assert files.load_private(tmp_path / "a.key") == second
    assert mode_of(tmp_path / "a.key") == 0o600


def test_an_existing_pub_alone_blocks_and_leaves_no_lone_key(tmp_path):
    (tmp_path / "a.pub").write_text("someone else's\n")
    with pytest.raises(KeyFileError, match=r"a\.pub: already exists"):
        files.save(generate("a", "node"), tmp_path)
    assert not (tmp_path / "a.key").exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    old = generate("a", "node")
    files.save(old, tmp_path)

    def broken_fsync(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(atomic.os, "fsync", broken_fsync)
    with pytest.raises(KeyFileError, match="cannot write: I/O error"):
        files.save(generate("a", "node"), tmp_path, force=True)
    monkeypatch.undo()
    assert files.load_private(tmp_path / "a.key") == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.key", "a.pub"]


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o606, 0o610, 0o601])
def test_private_key_accessible_by_others_is_refused(tmp_path, mode):
    key, _ = files.save(generate("a", "node"), tmp_path)
    os.chmod(key, mode)
    with pytest.raises(InsecureKeyFile) as info:
        files.load_private(key)
    message = str(info.value)
    assert str(key) in message and f"mode {mode:04o}" in message
    assert f"chmod 600 {key}" in message


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_owner_only_modes_are_fine(tmp_path, mode):
    key, _ = files.save(generate("a", "node"), tmp_path)
    os.chmod(key, mode)
    assert files.load_private(key).name == "a"


def test_public_file_may_be_world_readable(tmp_path):
    _, pub = files.save(generate("a", "node"), tmp_path)
    os.chmod(pub, 0o666)
    assert files.load_public(pub).name == "a"


def _private_file(tmp_path, content: bytes):
    path = tmp_path / "a.key"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    return path


GOOD = generate("a", "node")
GOOD_TEXT = files.private_text(GOOD)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"not = [toml", "not a pushjobs key file"),
        (b"\xff\xfe", "not a pushjobs key file"),
        (b"", "missing or invalid 'name'"),
        (b'name = "a"\nkind = "node"\n', "missing or invalid 'ed25519_secret'"),
        (GOOD_TEXT.replace('kind = "node"', "kind = 3").encode(), "invalid 'kind'"),
        (GOOD_TEXT.replace('kind = "node"', 'kind = "robot"').encode(), "invalid kind"),
        (GOOD_TEXT.replace('name = "a"', 'name = "-a"').encode(), "invalid name"),
        (GOOD_TEXT.replace(GOOD.curve_secret, "abcde").encode(), "curve_secret must be 32"),
        (
            GOOD_TEXT.replace(files.b64(GOOD.ed25519_secret), "!!").encode(),
            "ed25519_secret is not valid base64",
        ),
        (
            GOOD_TEXT.replace(files.b64(GOOD.ed25519_secret), files.b64(b"x" * 16)).encode(),
            "ed25519_secret must be 32 bytes",
        ),
    ],
    ids=[
        "toml",
        "binary",
        "empty",
        "no-secret",
        "kind-type",
        "kind",
        "name",
        "curve",
        "b64",
        "short",
    ],
)
def test_malformed_private_files_name_path_and_problem(tmp_path, content, needle):
    path = _private_file(tmp_path, content)
    with pytest.raises(KeyFileError, match=needle) as info:
        files.load_private(path)
    assert str(info.value).startswith(f"{path}: ")


def test_public_file_with_a_lying_fingerprint_is_refused(tmp_path):
    _, pub = files.save(generate("a", "node"), tmp_path)
    other = generate("b", "node").public.fingerprint
    text = pub.read_text().replace(generate_fp(pub), other)
    pub.write_text(text)
    with pytest.raises(KeyFileError, match="fingerprint line does not match"):
        files.load_public(pub)


def generate_fp(pub):
    return next(
        line.split('"')[1] for line in pub.read_text().splitlines() if line.startswith("finger")
    )


def test_missing_files_and_directories(tmp_path):
    with pytest.raises(KeyFileError, match=r"nope\.key: no such key file"):
        files.load_private(tmp_path / "nope.key")
    with pytest.raises(KeyFileError, match=r"nope\.pub: no such key file"):
        files.load_public(tmp_path / "nope.pub")
    (tmp_path / "d.key").mkdir(mode=0o700)
    with pytest.raises(KeyFileError, match="not a regular file"):
        files.load_private(tmp_path / "d.key")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    _, pub = files.save(generate("a", "node"), tmp_path)
    os.chmod(pub, 0)
    with pytest.raises(KeyFileError, match="cannot read: Permission denied"):
        files.load_public(pub)


def test_bad_name_never_becomes_a_path(tmp_path):
    with pytest.raises(KeyFileError, match="invalid name"):
        files.private_path(tmp_path, "../etc/passwd")
