"""Signers and verifiers: Ed25519 identity keys and HMAC-SHA256 session keys.

What is signed is always ``header + b"\\n" + body``: the header is printable ASCII with no
newline (``framing.py`` enforces it), so the split is unambiguous and a signature cannot be
moved to another header. Verification happens before the body is decoded; HMAC tags are
compared with ``hmac.compare_digest`` (constant time), and Ed25519 verification in
``cryptography`` does not branch on secret data.

``cryptography`` is imported when an Ed25519 key is first used, not with this module: a
process that only ever uses session keys, or Ed25519 through libsodium as an agent does
(``agent.ed25519``), does not pay its 9 MiB.

A verifier may be bound to an ``owner``: the only ``sender`` allowed to use that key.
Without that binding one node holding a valid session key could speak for another.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from pushjobs.errors import SignatureError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

ED25519: Final = "ed25519"
HMAC_SHA256: Final = "hmac-sha256"
METHODS: Final = frozenset({ED25519, HMAC_SHA256})

SIGNATURE_BYTES: Final = {ED25519: 64, HMAC_SHA256: 32}
SESSION_KEY_BYTES: Final = 32


class Signer(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def key_id(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


class Verifier(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def owner(self) -> str | None:
        """The only sender allowed to sign with this key, or None for any."""
        ...

    def verify(self, data: bytes, signature: bytes) -> None:
        """Return if ``signature`` is valid for ``data``, else raise SignatureError."""
        ...

    def verify_frames(self, header: bytes, body: bytes, signature: bytes) -> None:
        """``verify(header + b"\\n" + body, signature)``, without the concatenation."""
        ...


class _Hmac:
    """HMAC-SHA256 with the key's inner and outer pads computed once.

    Copying a keyed HMAC object costs half of what ``hmac.digest`` costs per call, and
    heartbeats, verified tens of thousands of times a second, are the hot path.
    """

    __slots__ = ("_keyed",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise SignatureError("an HMAC key must be at least 16 bytes")
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    def tag(self, data: bytes) -> bytes:
        mac = self._keyed.copy()
        mac.update(data)
        return mac.digest()


class PrefixedHmac:
    """HMAC-SHA256 of messages that all begin with the same ``prefix``.

    ``tag(rest) == hmac.digest(key, prefix + rest, "sha256")``. The key's inner and outer
    pads are two plain SHA-256 states, and the prefix is hashed into the inner one once;
    each tag copies both states and hashes only ``rest``. Copying ``hashlib`` states costs
    about half of copying a keyed ``hmac`` object (whose ``copy`` runs in Python), and the
    fleet simulator signs every heartbeat of 100,000 nodes this way: a heartbeat changes
    only after its sequence number.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes, prefix: bytes = b"") -> None:
        if len(key) < 16:
            raise SignatureError("an HMAC key must be at least 16 bytes")
        if len(key) > _SHA256_BLOCK:  # RFC 2104: a key longer than a block is hashed first
            key = hashlib.sha256(key).digest()
        key = key.ljust(_SHA256_BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(_IPAD))
        self._inner.update(prefix)
        self._outer = hashlib.sha256(key.translate(_OPAD))

    def tag(self, rest: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(rest)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def extended(self, more: bytes) -> PrefixedHmac:
        """The same key, with ``more`` appended to the prefix.

        The outer state is shared, not copied: it is only ever copied from. A state is a
        quarter of a kilobyte, and the simulator keeps two prefixes per node."""
        other = PrefixedHmac.__new__(PrefixedHmac)
        other._inner = self._inner.copy()
        other._inner.update(more)
        other._outer = self._outer
        return other


_SHA256_BLOCK: Final = 64
_IPAD: Final = bytes(b ^ 0x36 for b in range(256))
_OPAD: Final = bytes(b ^ 0x5C for b in range(256))


class HmacSigner:
    __slots__ = ("_hmac", "key_id")
    method: Final = HMAC_SHA256

    def __init__(self, key_id: str, key: bytes) -> None:
        self.key_id = key_id
        self._hmac = _Hmac(key)

    def sign(self, data: bytes) -> bytes:
        return self._hmac.tag(data)


class HmacVerifier:
    """Verifies HMAC-SHA256 tags with one key.

    ``verify_frames`` is the receive path: every message signed with one session key
    carries the same header (it names the key), so the inner state that has hashed the
    key's pad and ``header + b"\\n"`` is kept (``PrefixedHmac``) and each message costs
    two state copies and the hash of its body alone: half of copying a keyed ``hmac``
    object and hashing the concatenation, which ``verify`` still does. A header other
    than the one kept (one verifier reached under two key ids) re-primes the state.
    """

    __slots__ = ("_header", "_keyed", "_prefixed", "owner")
    method: Final = HMAC_SHA256

    def __init__(self, key: bytes, owner: str | None = None) -> None:
        self.owner = owner
        self._keyed = PrefixedHmac(key)
        self._header = b""
        self._prefixed = self._keyed.extended(b"\n")

    def verify(self, data: bytes, signature: bytes) -> None:
        if not hmac.compare_digest(self._keyed.tag(data), signature):
            raise SignatureError("HMAC signature does not verify")

    def verify_frames(self, header: bytes, body: bytes, signature: bytes) -> None:
        if header != self._header:
            self._prefixed = self._keyed.extended(header + b"\n")
            self._header = header
        prefixed = self._prefixed  # inlined PrefixedHmac.tag: the heartbeat hot path
        inner = prefixed._inner.copy()
        inner.update(body)
        outer = prefixed._outer.copy()
        outer.update(inner.digest())
        if not hmac.compare_digest(outer.digest(), signature):
            raise SignatureError("HMAC signature does not verify")


@dataclass(frozen=True, slots=True)
class Ed25519Signer:
    key_id: str
    private_key: Ed25519PrivateKey
    method: str = ED25519

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)


@dataclass(frozen=True, slots=True)
class Ed25519Verifier:
    public_key: Ed25519PublicKey
    owner: str | None = None
    method: str = ED25519

    def verify(self, data: bytes, signature: bytes) -> None:
        from cryptography.exceptions import InvalidSignature

        try:
            self.public_key.verify(signature, data)
        except InvalidSignature:
            raise SignatureError("Ed25519 signature does not verify") from None

    def verify_frames(self, header: bytes, body: bytes, signature: bytes) -> None:
        self.verify(header + b"\n" + body, signature)


def ed25519_verifier(public_raw: bytes, owner: str | None = None) -> Ed25519Verifier:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = Ed25519PublicKey.from_public_bytes(public_raw)
    except ValueError as exc:
        raise SignatureError(f"not an Ed25519 public key: {exc}") from exc
    return Ed25519Verifier(key, owner)
