"""The agent's Ed25519: its signer (config requests) and the server's verifier.

Through libsodium where there is one (``keys.sodium``: the library libzmq already loaded),
else ``pushjobs.protocol.signing``'s, on ``cryptography``. Both give the same signatures
(Ed25519 is deterministic) and accept the same ones from the server; libsodium costs the
agent no memory, ``cryptography`` about 9 MiB of its RSS.
"""

from __future__ import annotations

from typing import Final

from keys import sodium
from keys.identity import PrivateIdentity
from pushjobs.errors import SignatureError
from pushjobs.protocol.signing import ED25519, Ed25519Signer, Signer, Verifier, ed25519_verifier


class SodiumSigner:
    __slots__ = ("_secret", "key_id")
    method: Final = ED25519

    def __init__(self, key_id: str, seed: bytes) -> None:
        self.key_id = key_id
        self._secret = sodium.ed25519_keypair(seed)[1]

    def sign(self, data: bytes) -> bytes:
        return sodium.sign(self._secret, data)


class SodiumVerifier:
    __slots__ = ("_public", "owner")
    method: Final = ED25519

    def __init__(self, public: bytes, owner: str | None = None) -> None:
        if len(public) != sodium.PUBLIC_BYTES:
            raise SignatureError(f"not an Ed25519 public key: {len(public)} bytes")
        self._public = public
        self.owner = owner

    def verify(self, data: bytes, signature: bytes) -> None:
        if not sodium.verify(self._public, data, signature):
            raise SignatureError("Ed25519 signature does not verify")

    def verify_frames(self, header: bytes, body: bytes, signature: bytes) -> None:
        self.verify(header + b"\n" + body, signature)


def signer(key_id: str, identity: PrivateIdentity) -> Signer:
    if sodium.available():
        return SodiumSigner(key_id, identity.ed25519_secret)
    return Ed25519Signer(key_id, identity.signing_key())


def verifier(public: bytes, owner: str | None = None) -> Verifier:
    if sodium.available():
        return SodiumVerifier(public, owner)
    return ed25519_verifier(public, owner)
