"""Secret env values of a job: sealed in the log, opened only to build a node's commit.

Theory of operation. A job's ``secret_env`` must outlive the server that accepted it: a
job is written to the log before its commands go out, and a successor re-asks the commit
of a job still voting, rebuilding it from the log. So the values are kept there, but
sealed: AES-256-GCM under a key derived (HKDF-SHA256) from the server's Ed25519 identity
seed, which every server of an installation shares and nothing else holds. Each value is
sealed on its own with a fresh 96-bit nonce, its variable's name as associated data (a
sealed value moved to another name does not open), and stored as ``sealed:v1:`` followed
by urlsafe base64 of nonce and ciphertext; the names stay in clear. Values are opened
only by ``CommandSender`` when it builds a ``Commit``, which travels over the CurveZMQ
command channel. What leaves the server otherwise (API replies, log lines) shows each
name with ``REDACTED`` in place of its value (``redacted``).

Pure apart from the random nonces; holds no state but the key.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from pushjobs.errors import KeyFileError
from pushjobs.protocol.signing import Ed25519Signer, Signer

MARKER: Final = "sealed:v1:"
REDACTED: Final = "<secret>"
SECRET_ENV: Final = "secret_env"  # the key of a job's options that holds sealed values
_INFO: Final = b"pushjobs job secret_env v1"
_NONCE_BYTES: Final = 12


class SecretBox:
    """Seals and opens secret values with one server installation's key."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    @classmethod
    def from_seed(cls, seed: bytes) -> SecretBox:
        """The box of the identity whose raw Ed25519 seed is ``seed``."""
        key = HKDF(algorithm=SHA256(), length=32, salt=None, info=_INFO).derive(seed)
        return cls(key)

    @classmethod
    def from_signing_key(cls, key: Ed25519PrivateKey) -> SecretBox:
        return cls.from_seed(key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))

    @classmethod
    def for_signer(cls, signer: Signer) -> SecretBox | None:
        """The box of the identity behind ``signer`` (the server's own), if it has one."""
        if isinstance(signer, Ed25519Signer):
            return cls.from_signing_key(signer.private_key)
        return None

    def seal(self, name: str, value: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, value.encode(), name.encode())
        return MARKER + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def open(self, name: str, sealed: str) -> str:
        """The value sealed for ``name``; KeyFileError if it was not sealed by this key."""
        if not sealed.startswith(MARKER):
            raise KeyFileError(f"secret_env {name}: not a sealed value")
        try:
            raw = base64.urlsafe_b64decode(sealed[len(MARKER) :])
            nonce, body = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
            return self._aead.decrypt(nonce, body, name.encode()).decode()
        except (InvalidTag, ValueError) as exc:
            raise KeyFileError(
                f"secret_env {name}: cannot be opened with this server's key "
                "(sealed by a server with another identity key?)"
            ) from exc

    def seal_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {name: self.seal(name, value) for name, value in env.items()}

    def open_env(self, sealed: Mapping[str, str]) -> dict[str, str]:
        return {name: self.open(name, value) for name, value in sealed.items()}


def redacted(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` fit to show anyone: each secret's name, never its value, sealed or not."""
    shown = dict(options)
    secret = options.get(SECRET_ENV)
    if isinstance(secret, Mapping):
        shown[SECRET_ENV] = dict.fromkeys(secret, REDACTED)
    elif secret is not None:
        shown[SECRET_ENV] = REDACTED
    return shown
