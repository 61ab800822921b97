from __future__ import annotations

import os
import stat

import pytest
import zmq
import zmq.utils.z85
from hypothesis import given
from hypothesis import strategies as st

from keys import files, z85
from keys.fingerprint import fingerprint, key_id
from keys.identity import generate
from pushjobs.errors import InsecureKeyFile, KeyFileError


@given(st.binary(max_size=64).map(lambda b: b[: len(b) - len(b) % 4]))
def test_z85_matches_zmq(data):
    assert z85.encode(data) == zmq.utils.z85.encode(data).decode()
    assert z85.decode(z85.encode(data)) == data


@pytest.mark.parametrize("text", ["abcd", "abcd\x7f", "~~~~~"])
def test_z85_rejects_bad_text(text):
    with pytest.raises(KeyFileError):
        z85.decode(text)


def test_generated_curve_keys_are_what_zmq_derives():
    identity = generate("web-01", "node")
    expected = zmq.curve_public(identity.curve_secret.encode()).decode()
    assert identity.public.curve_public == expected
    assert len(identity.public.curve_public) == 40


def test_fingerprint_is_openssh_style():
    fp = fingerprint(b"\x00" * 32)
    assert fp.startswith("SHA256:") and "=" not in fp and len(fp) == 7 + 43
    assert len(key_id(b"\x00" * 32)) == 16


@pytest.mark.parametrize("name", ["", ".hidden", "-x", "a b", "a/b", "x" * 129, "é"])
def test_bad_names(name):
    with pytest.raises(KeyFileError, match="invalid name"):
        generate(name, "node")


def test_bad_kind():
    with pytest.raises(KeyFileError, match="invalid kind"):
        generate("n", "robot")


def test_save_and_load_round_trip(tmp_path):
    identity = generate("web-01", "node")
    key, pub = files.save(identity, tmp_path / "keys")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644
    assert files.load_private(key) == identity
    assert files.load_public(pub) == identity.public
    assert "PRIVATE" in key.read_text().splitlines()[0]
    assert not list((tmp_path / "keys").glob(".*tmp"))


def test_signing_key_signs_for_its_public_key(tmp_path):
    identity = generate("srv", "server")
    signature = identity.signing_key().sign(b"data")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(identity.public.ed25519_public).verify(signature, b"data")


def test_refuses_to_overwrite_without_force(tmp_path):
    files.save(generate("a", "user"), tmp_path)
    with pytest.raises(KeyFileError, match="already exists"):
        files.save(generate("a", "user"), tmp_path)
    second = generate("a", "user")
    files.save(second, tmp_path, force=True)
    assert files.load_private(tmp_path / "a.key") == second


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_private_key_readable_by_others_is_refused(tmp_path, mode):
    key, _ = files.save(generate("a", "node"), tmp_path)
    os.chmod(key, mode)
    with pytest.raises(InsecureKeyFile, match=rf"mode {mode:04o}.*chmod 600"):
        files.load_private(key)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"not = [toml", "not a pushjobs key file"),
        (b"\xff\xfe", "not a pushjobs key file"),
        (b'name = "a"\nkind = "node"\n', "missing or invalid 'ed25519_secret'"),
        (b'name = "a"\nkind = "node"\ned25519_secret = "!!"\ncurve_secret = "x"\n', "base64"),
    ],
)
def test_malformed_private_files(tmp_path, content, needle):
    path = tmp_path / "a.key"
    path.write_bytes(content)
    os.chmod(path, 0o600)
    with pytest.raises(KeyFileError, match=needle) as info:
        files.load_private(path)
    assert str(path) in str(info.value)


def test_missing_files(tmp_path):
    with pytest.raises(KeyFileError, match="no such key file"):
        files.load_private(tmp_path / "nope.key")
    with pytest.raises(KeyFileError, match="no such key file"):
        files.load_public(tmp_path / "nope.pub")
