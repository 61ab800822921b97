from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import zmq
import zmq.utils.z85
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from keys import z85
from keys.fingerprint import fingerprint, key_id
from keys.identity import PrivateIdentity, PublicIdentity, generate
from pushjobs.errors import KeyFileError


@given(st.binary(max_size=64).map(lambda b: b[: len(b) - len(b) % 4]))
def test_z85_matches_zmq(data):
    assert z85.encode(data) == zmq.utils.z85.encode(data).decode()
    assert z85.decode(z85.encode(data)) == data
    assert z85.decode(zmq.utils.z85.encode(data).decode()) == data


def test_z85_rfc_32_test_vector():
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85.encode(raw) == "HelloWorld"
    assert z85.decode("HelloWorld") == raw


@pytest.mark.parametrize(
    "text",
    ["abcd", "abcd\x7f", "%nSc1", "é????", "abcd "],
    ids=["short", "control", "overflow", "non-ascii", "space"],
)
def test_z85_rejects_bad_text(text):
    with pytest.raises(KeyFileError):
        z85.decode(text)


def test_z85_rejects_unaligned_bytes():
    with pytest.raises(KeyFileError, match="multiple of 4"):
        z85.encode(b"abc")


def test_generated_curve_keys_are_what_zmq_derives():
    identity = generate("web-01", "node")
    expected = zmq.curve_public(identity.curve_secret.encode()).decode()
    assert identity.public.curve_public == expected
    assert len(identity.public.curve_public) == 40 == len(identity.curve_secret)


def test_generated_keys_work_for_a_curvezmq_handshake():
    server, client = generate("srv", "server"), generate("cli", "user")
    ctx = zmq.Context()
    try:
        rep = ctx.socket(zmq.REP)
        req = ctx.socket(zmq.REQ)
        for s in (rep, req):
            s.linger = 0
            s.rcvtimeo = s.sndtimeo = 5000
        rep.curve_server = True
        rep.curve_secretkey = server.curve_secret.encode()
        port = rep.bind_to_random_port("tcp://127.0.0.1")
        req.curve_serverkey = server.public.curve_public.encode()
        req.curve_publickey = client.public.curve_public.encode()
        req.curve_secretkey = client.curve_secret.encode()
        req.connect(f"tcp://127.0.0.1:{port}")
        req.send(b"ping")
        assert rep.recv() == b"ping"
        rep.close()
        req.close()
    finally:
        ctx.term()


def test_fingerprint_is_openssh_style():
    fp = fingerprint(b"\x00" * 32)
    assert fp.startswith("SHA256:") and "=" not in fp and len(fp) == 7 + 43
    assert key_id(b"\x00" * 32) == "66687aadf862bd77"


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")
def test_fingerprint_equals_ssh_keygen(tmp_path):
    identity = generate("alice", "user")
    key = Ed25519PublicKey.from_public_bytes(identity.public.ed25519_public)
    path = tmp_path / "id.pub"
    path.write_bytes(key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH) + b" alice\n")
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.stdout.split()[1] == identity.public.fingerprint


@pytest.mark.parametrize("name", ["", ".hidden", "-x", "a b", "a/b", "a\n", "x" * 129, "é", "a:b"])
def test_bad_names(name):
    with pytest.raises(KeyFileError, match="invalid name"):
        generate(name, "node")


@pytest.mark.parametrize("name", ["a", "web-01.example.com", "alice@corp", "_x", "9", "x" * 128])
def test_good_names(name):
    assert generate(name, "node").name == name


def test_bad_kind():
    with pytest.raises(KeyFileError, match="invalid kind"):
        generate("n", "robot")


def test_signing_key_signs_for_its_public_key():
    identity = generate("srv", "server")
    signature = identity.signing_key().sign(b"data")
    identity.public.verifying_key().verify(signature, b"data")
    assert identity.public.key_id == key_id(identity.public.ed25519_public)


def test_identities_check_themselves():
    good = generate("a", "node")
    with pytest.raises(KeyFileError, match="32 bytes"):
        PublicIdentity("a", "node", b"short", good.public.curve_public)
    with pytest.raises(KeyFileError, match="curve_public"):
        PublicIdentity("a", "node", good.public.ed25519_public, "x" * 35)
    other = generate("a", "node")
    with pytest.raises(KeyFileError, match="ed25519_secret does not match"):
        PrivateIdentity(good.public, other.ed25519_secret, good.curve_secret)
    with pytest.raises(KeyFileError, match="curve_secret does not match"):
        PrivateIdentity(good.public, good.ed25519_secret, other.curve_secret)


def test_keys_package_needs_no_zmq():
    script = (
        "import sys\n"
        "sys.modules['zmq'] = None\n"
        "from keys import files, registry\n"
        "from keys.identity import generate\n"
        "print(len(generate('n', 'node').public.curve_public))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "40"
