"""Identities: a name, a kind, an Ed25519 signing key and a CurveZMQ key pair.

CurveZMQ keys are X25519 keys, so ``cryptography`` generates them and Z85 encodes them:
the same bytes ``zmq.curve_keypair()`` would give, without importing zmq here.

The public halves of a key file's secrets come from libsodium where there is one
(``keys.sodium``), else from ``cryptography``, imported only then: an agent checks its
key file at start and never needs ``cryptography``'s 9 MiB for it.

Both dataclasses check themselves on construction, so an identity that exists is valid:
readers of key files and of the registry need no checks of their own.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from keys import sodium, z85
from keys.fingerprint import fingerprint, key_id
from pushjobs.errors import KeyFileError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

Kind = Literal["server", "node", "user"]
KINDS: tuple[Kind, ...] = ("server", "node", "user")
KEY_BYTES = 32
_NAME = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9._@-]{0,127}")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise KeyFileError(
            f"invalid name {name!r}: use 1-128 of A-Z a-z 0-9 . _ @ -, not starting with '.' or '-'"
        )
    return name


def check_kind(kind: str) -> Kind:
    for known in KINDS:
        if kind == known:
            return known
    raise KeyFileError(f"invalid kind {kind!r}: expected one of {', '.join(KINDS)}")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, what: str) -> bytes:
    """Decode a base64 key of ``KEY_BYTES`` bytes; ``what`` names it in the error."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"{what} is not valid base64") from None
    if len(raw) != KEY_BYTES:
        raise KeyFileError(f"{what} must be {KEY_BYTES} bytes, got {len(raw)}")
    return raw


def _curve_key(text: str, what: str) -> bytes:
    raw = z85.decode(text)
    if len(raw) != KEY_BYTES:
        raise KeyFileError(f"{what} must be {KEY_BYTES} bytes (40 Z85 characters)")
    return raw


@dataclass(frozen=True, slots=True)
class PublicIdentity:
    name: str
    kind: Kind
    ed25519_public: bytes  # raw
    curve_public: str  # Z85, 40 characters

    def __post_init__(self) -> None:
        check_name(self.name)
        check_kind(self.kind)
        if len(self.ed25519_public) != KEY_BYTES:
            raise KeyFileError(f"ed25519_public must be {KEY_BYTES} bytes")
        _curve_key(self.curve_public, "curve_public")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.ed25519_public)

    @property
    def key_id(self) -> str:
        return key_id(self.ed25519_public)

    def verifying_key(self) -> Ed25519PublicKey:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        return Ed25519PublicKey.from_public_bytes(self.ed25519_public)


@dataclass(frozen=True, slots=True)
class PrivateIdentity:
    public: PublicIdentity
    ed25519_secret: bytes  # the raw 32-byte seed
    curve_secret: str  # Z85, 40 characters

    def __post_init__(self) -> None:
        # A private key that does not match its public half would sign what nobody can verify.
        if ed25519_public_of(self.ed25519_secret) != self.public.ed25519_public:
            raise KeyFileError("ed25519_secret does not match the public key")
        if curve_public_of(self.curve_secret) != self.public.curve_public:
            raise KeyFileError("curve_secret does not match the public key")

    @classmethod
    def from_secrets(
        cls, name: str, kind: str, ed25519_secret: bytes, curve_secret: str
    ) -> PrivateIdentity:
        public = PublicIdentity(
            check_name(name),
            check_kind(kind),
            ed25519_public_of(ed25519_secret),
            curve_public_of(curve_secret),
        )
        return cls(public, ed25519_secret, curve_secret)

    @property
    def name(self) -> str:
        return self.public.name

    def signing_key(self) -> Ed25519PrivateKey:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.ed25519_secret)


def generate(name: str, kind: str) -> PrivateIdentity:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    seed = Ed25519PrivateKey.generate().private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption()
    )
    curve = X25519PrivateKey.generate().private_bytes(
        Encoding.Raw, PrivateFormat.Raw, NoEncryption()
    )
    return PrivateIdentity.from_secrets(name, kind, seed, z85.encode(curve))


def ed25519_public_of(seed: bytes) -> bytes:
    if len(seed) != KEY_BYTES:
        raise KeyFileError(f"ed25519_secret must be {KEY_BYTES} bytes")
    if sodium.available():
        return sodium.ed25519_keypair(seed)[0]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def curve_public_of(curve_secret: str) -> str:
    secret = _curve_key(curve_secret, "curve_secret")
    if sodium.available():
        return z85.encode(sodium.x25519_public(secret))
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = X25519PrivateKey.from_private_bytes(secret).public_key()
    return z85.encode(public.public_bytes(Encoding.Raw, PublicFormat.Raw))
