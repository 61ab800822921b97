from __future__ import annotations

import hmac
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pushjobs.errors import (
    FrameError,
    MalformedMessage,
    OversizedFrame,
    SignatureError,
    UnknownKey,
)
from pushjobs.protocol import framing, signing
from pushjobs.protocol.codec import encode
from pushjobs.protocol.messages import AckCommit, Progress
from tests.protocol.samples import SAMPLES

HEARTBEAT = SAMPLES[1]  # sender node-1
SESSION_KEY = os.urandom(32)
SERVER_KEY = Ed25519PrivateKey.generate()
SERVER_PUB = SERVER_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def keyring(**extra):
    keys = {
        ("hmac-sha256", "node-1.s1"): signing.HmacVerifier(SESSION_KEY, owner="node-1"),
        ("ed25519", "server"): signing.ed25519_verifier(SERVER_PUB),
    }
    keys.update(extra)

    def resolve(method, key_id):
        try:
            return keys[(method, key_id)]
        except KeyError:
            raise UnknownKey(f"no {method} key {key_id}") from None

    return resolve


HMAC = signing.HmacSigner("node-1.s1", SESSION_KEY)
ED = signing.Ed25519Signer("server", SERVER_KEY)


@pytest.mark.parametrize("signer", [HMAC, ED], ids=["hmac", "ed25519"])
def test_seal_and_open(signer):
    frames = framing.seal(HEARTBEAT, signer)
    assert len(frames) == 3
    assert frames[0] == f"PJ1 {signer.method} {signer.key_id}".encode()
    assert framing.open_frames(frames, keyring()) == HEARTBEAT


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("signer", [HMAC, ED], ids=["hmac", "ed25519"])
def test_bad_signature(signer):
    header, body, sig = framing.seal(HEARTBEAT, signer)
    with pytest.raises(SignatureError, match="does not verify"):
        framing.open_frames([header, body, _flip(sig, 5)], keyring())


@pytest.mark.parametrize("signer", [HMAC, ED], ids=["hmac", "ed25519"])
def test_tampered_body(signer):
    header, body, sig = framing.seal(HEARTBEAT, signer)
    tampered = body.replace(b'"sequence":7', b'"sequence":8')
    assert tampered != body
    with pytest.raises(SignatureError):
        framing.open_frames([header, tampered, sig], keyring())


def test_tampered_header_naming_another_known_key():
    _, body, sig = framing.seal(HEARTBEAT, HMAC)
    other = signing.HmacVerifier(os.urandom(32), owner="node-1")
    with pytest.raises(SignatureError, match="does not verify"):
        framing.open_frames([b"PJ1 hmac-sha256 node-1.s2", body, sig], lambda m, k: other)


def test_wrong_key():
    frames = framing.seal(HEARTBEAT, signing.HmacSigner("node-1.s1", os.urandom(32)))
    with pytest.raises(SignatureError, match="does not verify"):
        framing.open_frames(frames, keyring())


def test_unknown_key():
    frames = framing.seal(HEARTBEAT, signing.HmacSigner("node-9.s1", SESSION_KEY))
    with pytest.raises(UnknownKey):
        framing.open_frames(frames, keyring())


def test_sender_must_own_the_key():
    impostor = AckCommit(sender="node-2", incarnation="i", sequence=1, timestamp=1, job_id="j")
    frames = framing.seal(impostor, HMAC)
    with pytest.raises(SignatureError, match="does not belong to sender 'node-2'"):
        framing.open_frames(frames, keyring())


def test_method_in_header_must_match_the_key():
    _, body, _ = framing.seal(HEARTBEAT, HMAC)
    hmac_key_under_ed_name = {("ed25519", "node-1.s1"): signing.HmacVerifier(SESSION_KEY)}
    resolve = lambda m, k: hmac_key_under_ed_name[(m, k)]  # noqa: E731
    ed_header = b"PJ1 ed25519 node-1.s1"
    sig = ED.sign(ed_header + b"\n" + body)
    with pytest.raises(SignatureError, match="is not a ed25519 key"):
        framing.open_frames([ed_header, body, sig], resolve)


@pytest.mark.parametrize("count", [0, 1, 2, 4, 5])
def test_wrong_frame_count(count):
    frames = framing.seal(HEARTBEAT, HMAC)
    frames = (frames + frames)[:count]
    with pytest.raises(FrameError, match=f"expected 3 frames, got {count}"):
        framing.open_frames(frames, keyring())


def test_oversized_header_is_refused_before_parsing():
    _, body, sig = framing.seal(HEARTBEAT, HMAC)
    with pytest.raises(OversizedFrame, match="header of 2049 bytes"):
        framing.open_frames([b"\xff" * 2049, body, sig], keyring())


def test_oversized_body_is_refused_before_verifying_or_parsing():
    header, _, sig = framing.seal(HEARTBEAT, HMAC)
    with pytest.raises(OversizedFrame, match="body of 65537 bytes"):
        framing.open_frames([header, b"{" * 65537, sig], keyring())


def test_limits_are_configurable():
    frames = framing.seal(HEARTBEAT, HMAC)
    with pytest.raises(OversizedFrame):
        framing.open_frames(frames, keyring(), framing.Limits(max_body_bytes=64))


def test_seal_refuses_a_body_receivers_would_drop():
    big = Progress(
        sender="node-1", incarnation="i", sequence=1, timestamp=1, job_id="j", message="x" * 70_000
    )
    with pytest.raises(OversizedFrame):
        framing.seal(big, HMAC)


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        (b"PJ1 hmac-sha256", "VERSION METHOD KEYID"),
        (b"PJ1 hmac-sha256 a b", "VERSION METHOD KEYID"),
        (b"PJ2 hmac-sha256 node-1.s1", "unsupported protocol version"),
        (b"PJ1 md5 node-1.s1", "unknown signing method"),
        (b"PJ1 hmac-sha256 node\n1", "invalid key id"),
        (b"PJ1 hmac-sha256 ", "invalid key id"),
        (b"PJ1 hmac-sha256 " + b"k" * 129, "invalid key id"),
        ("PJ1 hmac-sha256 nöde".encode(), "not ASCII"),
    ],
)
def test_bad_headers(header, needle):
    body = encode(HEARTBEAT)
    with pytest.raises(FrameError, match=needle):
        framing.open_frames([header, body, b"\0" * 32], keyring())


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_signature_length_is_checked(length):
    header, body, _ = framing.seal(HEARTBEAT, HMAC)
    with pytest.raises(SignatureError, match="must be 32 bytes"):
        framing.open_frames([header, body, b"\0" * length], keyring())


def test_signature_is_checked_before_the_body_is_decoded():
    header = b"PJ1 hmac-sha256 node-1.s1"
    with pytest.raises(SignatureError):
        framing.open_frames([header, b"not json", b"\0" * 32], keyring())


def test_a_validly_signed_garbage_body_is_malformed():
    header = b"PJ1 hmac-sha256 node-1.s1"
    body = b"not json"
    with pytest.raises(MalformedMessage):
        framing.open_frames([header, body, HMAC.sign(header + b"\n" + body)], keyring())


def test_signer_with_invalid_key_id_is_refused():
    with pytest.raises(FrameError):
        framing.seal(HEARTBEAT, signing.HmacSigner("has space", SESSION_KEY))


def test_hmac_key_too_short():
    with pytest.raises(SignatureError, match="at least 16 bytes"):
        signing.HmacVerifier(b"short")


def test_not_an_ed25519_public_key():
    with pytest.raises(SignatureError, match="not an Ed25519 public key"):
        signing.ed25519_verifier(b"\x01" * 31)


@pytest.mark.parametrize("key_bytes", [16, 32, 64, 65, 200])
@pytest.mark.parametrize("prefix", [b"", b"PJ1 hmac-sha256 k\n{", b"x" * 150])
def test_prefixed_hmac_signs_what_hmac_signs(key_bytes, prefix):
    key = os.urandom(key_bytes)
    mac = signing.PrefixedHmac(key, prefix)
    for rest in (b"", b"1,", b"y" * 300):
        assert mac.tag(rest) == hmac.digest(key, prefix + rest, "sha256")
        longer = mac.extended(b"more")
        assert longer.tag(rest) == hmac.digest(key, prefix + b"more" + rest, "sha256")
        assert mac.tag(rest) == hmac.digest(key, prefix + rest, "sha256")  # left as it was
    with pytest.raises(SignatureError, match="at least 16 bytes"):
        signing.PrefixedHmac(b"short")
