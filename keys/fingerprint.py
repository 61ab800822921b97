"""Fingerprints of Ed25519 public keys, as OpenSSH shows them, and short key ids."""

from __future__ import annotations

import base64
import hashlib


def fingerprint(public_raw: bytes) -> str:
    """``SHA256:`` + unpadded base64 of the key's SHA-256, comparable with ssh-keygen -l."""
    digest = hashlib.sha256(public_raw).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def key_id(public_raw: bytes) -> str:
    """A short id for wire headers: the first 16 hex digits of the key's SHA-256."""
    return hashlib.sha256(public_raw).hexdigest()[:16]
