"""Per-node HMAC session keys, and the key resolver of the node reply channel.

The same key signs the server's commands to that node: the node verifies them with the
key it was given, and nobody else holds it. (An Ed25519 signature per command cost 40% of
the time to fan a job out to 10,000 nodes; an HMAC costs 1/30th of it.)

A node gets a fresh session key with every accepted config request (so keys rotate with
each server incarnation and whenever a node asks again). The previous key of a node stays
valid for ``grace_s``: messages the node sent just before it switched keys still verify.
A revoked node loses every key at once. Each key is bound to its node: a node holding a
valid key cannot sign for another (``HmacVerifier.owner``).

A key that stopped verifying is remembered (the newest ``RETIRED_KEEP``): a message
signed with it is still refused, but the node it belonged to is noted (``take_stale``),
so the server can tell that node its session is over instead of ignoring it for an hour.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass

from pushjobs.errors import UnknownKey
from pushjobs.protocol.signing import (
    HMAC_SHA256,
    SESSION_KEY_BYTES,
    HmacSigner,
    HmacVerifier,
    Verifier,
)

RETIRED_KEEP = 100_000  # retired key ids remembered, for telling their nodes


@dataclass(frozen=True, slots=True)
class SessionKey:
    key_id: str
    node: str
    secret: bytes

    @property
    def secret_b64(self) -> str:
        return base64.b64encode(self.secret).decode("ascii")


class SessionKeys:
    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = grace_s
        self._verifiers: dict[str, HmacVerifier] = {}
        self._current: dict[str, str] = {}  # node -> key id
        self._signers: dict[str, HmacSigner] = {}  # node -> signer of its current key
        self._retiring: dict[str, float] = {}  # key id -> when it stops verifying
        self._retired: dict[str, str] = {}  # key id -> node, oldest first
        self._stale: set[str] = set()  # nodes heard under a retired key since take_stale

    def issue(self, node: str, now: float) -> SessionKey:
        """A new key for ``node``; its previous one retires after the grace period."""
        old = self._current.get(node)
        if old is not None:
            self._retiring[old] = now + self.grace_s
        key = SessionKey("s" + secrets.token_hex(12), node, secrets.token_bytes(SESSION_KEY_BYTES))
        self._verifiers[key.key_id] = HmacVerifier(key.secret, owner=node)
        self._signers[node] = HmacSigner(key.key_id, key.secret)
        self._current[node] = key.key_id
        return key

    def signer(self, node: str) -> HmacSigner | None:
        """Signs commands to ``node`` with its current session key (see ``Server._send``)."""
        return self._signers.get(node)

    def revoke(self, node: str) -> bool:
        """Drop every key of ``node``; True if it had one."""
        gone = [kid for kid, v in self._verifiers.items() if v.owner == node]
        for kid in gone:
            del self._verifiers[kid]
            self._retiring.pop(kid, None)
            self._retire(kid, node)
        self._current.pop(node, None)
        self._signers.pop(node, None)
        return bool(gone)

    def expire(self, now: float) -> None:
        for kid, until in list(self._retiring.items()):
            if until <= now:
                del self._retiring[kid]
                gone = self._verifiers.pop(kid, None)
                if gone is not None and gone.owner is not None:
                    self._retire(kid, gone.owner)

    def resolve(self, method: str, key_id: str) -> Verifier:
        if method != HMAC_SHA256:
            raise UnknownKey(f"node messages must be signed with {HMAC_SHA256}")
        verifier = self._verifiers.get(key_id)
        if verifier is None:
            node = self._retired.get(key_id)
            if node is not None:
                self._stale.add(node)
                raise UnknownKey(f"session key {key_id[:32]!r} of {node} has retired")
            raise UnknownKey(f"unknown session key {key_id[:32]!r}")
        return verifier

    def take_stale(self) -> set[str]:
        """Nodes heard under a retired key since the last call (their session is over)."""
        stale, self._stale = self._stale, set()
        return stale

    def _retire(self, key_id: str, node: str) -> None:
        self._retired[key_id] = node
        if len(self._retired) > RETIRED_KEEP:
            del self._retired[next(iter(self._retired))]

    def nodes(self) -> list[str]:
        return list(self._current)

    def has(self, node: str) -> bool:
        return node in self._current
