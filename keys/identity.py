"""Identities: a name, a kind, an Ed25519 signing key and a CurveZMQ key pair.

CurveZMQ keys are X25519 keys, so ``cryptography`` generates them and Z85 encodes them:
the same bytes ``zmq.curve_keypair()`` would give, without importing zmq here.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from keys import z85
from keys.fingerprint import fingerprint, key_id
from pushjobs.errors import KeyFileError

Kind = Literal["server", "node", "user"]
KINDS: tuple[Kind, ...] = ("server", "node", "user")
_NAME = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9._@-]{0,127}")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise KeyFileError(
            f"invalid name {name!r}: use 1-128 of A-Z a-z 0-9 . _ @ -, not starting with '.' or '-'"
        )
    return name


def check_kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise KeyFileError(f"invalid kind {kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, size: int, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise KeyFileError(f"{what} is not valid base64") from None
    if len(raw) != size:
        raise KeyFileError(f"{what} must be {size} bytes, got {len(raw)}")
    return raw


@dataclass(frozen=True, slots=True)
class PublicIdentity:
    name: str
    kind: Kind
    ed25519_public: bytes  # raw, 32 bytes
    curve_public: str  # Z85, 40 characters

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.ed25519_public)

    @property
    def key_id(self) -> str:
        return key_id(self.ed25519_public)


@dataclass(frozen=True, slots=True)
class PrivateIdentity:
    public: PublicIdentity
    ed25519_secret: bytes  # raw seed, 32 bytes
    curve_secret: str  # Z85

    @property
    def name(self) -> str:
        return self.public.name

    def signing_key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.ed25519_secret)


def generate(name: str, kind: str) -> PrivateIdentity:
    check_name(name)
    signing = Ed25519PrivateKey.generate()
    seed = signing.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    curve = X25519PrivateKey.generate()
    curve_secret = curve.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = PublicIdentity(
        name=name,
        kind=check_kind(kind),
        ed25519_public=signing.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw),
        curve_public=curve_public_of(z85.encode(curve_secret)),
    )
    return PrivateIdentity(public, seed, z85.encode(curve_secret))


def curve_public_of(curve_secret_z85: str) -> str:
    secret = z85.decode(curve_secret_z85)
    if len(secret) != 32:
        raise KeyFileError("a CurveZMQ secret key is 32 bytes")
    public = X25519PrivateKey.from_private_bytes(secret).public_key()
    return z85.encode(public.public_bytes(Encoding.Raw, PublicFormat.Raw))


def ed25519_public_of(seed: bytes) -> bytes:
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
