"""Fingerprints of Ed25519 public keys, exactly as OpenSSH shows them, and short key ids.

OpenSSH hashes the key's wire form (RFC 8709: the string "ssh-ed25519", then the raw
key, each with a 4-byte length), not the raw 32 bytes; hashing the same bytes makes a
fingerprint that an operator can check against ``ssh-keygen -l``.
"""

from __future__ import annotations

import base64
import hashlib
import struct

_ALGORITHM = b"ssh-ed25519"


def ssh_wire_blob(public_raw: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(part)) + part for part in (_ALGORITHM, public_raw))


def fingerprint(public_raw: bytes) -> str:
    """``SHA256:`` + unpadded base64 of the SHA-256 of the key, as ``ssh-keygen -l`` prints."""
    digest = hashlib.sha256(ssh_wire_blob(public_raw)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def key_id(public_raw: bytes) -> str:
    """A short id for wire headers: the first 16 hex digits of the raw key's SHA-256."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


SELF_PREFIX = "pub:"


def self_key_id(public_raw: bytes) -> str:
    """The key id of a self-signed message: the public key itself, so a receiver that does
    not know the sender can verify the signature before it reads the body."""
    return SELF_PREFIX + base64.b64encode(public_raw).decode("ascii")


def public_of_self_key_id(kid: str) -> bytes | None:
    """The 32-byte public key a self key id carries; None if ``kid`` is not one."""
    if not kid.startswith(SELF_PREFIX):
        return None
    try:
        raw = base64.b64decode(kid[len(SELF_PREFIX) :], validate=True)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None
