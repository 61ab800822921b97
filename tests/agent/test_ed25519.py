"""libsodium (``keys.sodium``) gives what ``cryptography`` gives: the same public keys, the
same signatures, the same verdicts. The agent uses it to keep ``cryptography`` out of its
memory; a difference here would be a node the server cannot verify, or the reverse."""

from __future__ import annotations

import hmac
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import ed25519
from keys import sodium
from keys.identity import generate
from pushjobs.errors import KeyFileError, SignatureError
from pushjobs.protocol.framing import open_frames, seal
from pushjobs.protocol.messages import ServerHeartbeat
from pushjobs.protocol.signing import Ed25519Signer, ed25519_verifier

pytestmark = pytest.mark.skipif(not sodium.available(), reason="no libsodium here")
RAW = (Encoding.Raw, PublicFormat.Raw)
keys32 = st.binary(min_size=32, max_size=32)


@settings(max_examples=50)
@given(seed=keys32, curve=keys32, data=st.binary(max_size=300))
def test_the_same_keys_and_signatures_as_cryptography(seed, curve, data):
    private = Ed25519PrivateKey.from_private_bytes(seed)
    public, secret = sodium.ed25519_keypair(seed)
    assert public == private.public_key().public_bytes(*RAW)
    assert sodium.x25519_public(curve) == (
        X25519PrivateKey.from_private_bytes(curve).public_key().public_bytes(*RAW)
    )
    signature = sodium.sign(secret, data)
    assert signature == private.sign(data)  # Ed25519 is deterministic
    assert sodium.verify(public, data, signature)
    assert not sodium.verify(public, data + b"x", signature)
    assert not sodium.verify(public, data, bytes([signature[0] ^ 1]) + signature[1:])


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_a_key_of_the_wrong_size_is_refused_before_libsodium_reads_it(size):
    with pytest.raises(KeyFileError):
        sodium.ed25519_keypair(b"k" * size)
    with pytest.raises(KeyFileError):
        sodium.x25519_public(b"k" * size)
    with pytest.raises(KeyFileError):
        sodium.sign(b"k" * (size if size != 64 else 63), b"data")


def test_a_signature_or_public_key_of_the_wrong_size_does_not_verify():
    public, secret = sodium.ed25519_keypair(b"s" * 32)
    signature = sodium.sign(secret, b"data")
    assert not sodium.verify(public, b"data", signature[:63])
    assert not sodium.verify(public, b"data", signature + b"\0")
    assert not sodium.verify(public[:31], b"data", signature)


def test_the_agents_verifier_takes_what_the_server_seals_and_refuses_another_key():
    server, other = generate("server", "server"), generate("other", "server")
    kid = server.public.key_id
    frames = seal(
        ServerHeartbeat(sender="server", incarnation="i", sequence=1, timestamp=1, leader=True),
        Ed25519Signer(kid, server.signing_key()),
    )
    mine = ed25519.verifier(server.public.ed25519_public, owner="server")
    assert isinstance(mine, ed25519.SodiumVerifier)
    assert open_frames(frames, lambda method, key_id: mine).sender == "server"
    theirs = ed25519.verifier(other.public.ed25519_public, owner="server")
    with pytest.raises(SignatureError):
        open_frames(frames, lambda method, key_id: theirs)


def test_the_agents_signer_signs_as_cryptography_does():
    node = generate("node-1", "node")
    frames = seal(
        ServerHeartbeat(sender="node-1", incarnation="i", sequence=1, timestamp=1, leader=False),
        ed25519.signer("kid", node),
    )
    assert frames == seal(
        ServerHeartbeat(sender="node-1", incarnation="i", sequence=1, timestamp=1, leader=False),
        Ed25519Signer("kid", node.signing_key()),
    )
    verifier = ed25519_verifier(node.public.ed25519_public)
    assert open_frames(frames, lambda method, key_id: verifier).sender == "node-1"


def test_the_agent_loads_neither_cryptography_nor_openssl():
    """Their 9 and 3.4 MiB were a third of an idle agent's memory (bench/footprint.py); its
    session HMACs are the same through Python's own SHA-256."""
    code = (
        "import sys, agent.__main__, hmac, hashlib\n"
        "from pushjobs.protocol.signing import HmacSigner\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('cryptography' in sys.modules, 'libcrypto' in maps, sys.modules['_hashlib'])\n"
        "print(HmacSigner('k', b'k' * 32).sign(b'data').hex())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, tag = out.stdout.splitlines()
    assert loaded == "False False None"
    assert tag == hmac.digest(b"k" * 32, b"data", "sha256").hex()
