"""Per-node HMAC session keys, and the key resolver of the node reply channel.

The same key signs the server's commands to that node: the node verifies them with the
key it was given, and nobody else holds it. (An Ed25519 signature per command cost 40% of
the time to fan a job out to 10,000 nodes; an HMAC costs 1/30th of it.)

A node gets a fresh session key with every accepted config request (so keys rotate with
each server incarnation and whenever a node asks again). A key is replaced only once the
node proves it holds a newer one: the node may never get a reply (its request timed out
while this server was stalled, its socket was gone), and retiring the key it still uses
would silence it. So every key issued stays valid until the node is heard using a newer
one; then the older ones stay valid for ``grace_s`` more (messages sent just before the
switch) and retire. Commands are signed with the key the node was last heard using (an
agent trusts its previous key as well as its newest), the newest when it has not been
heard with a key still valid. At most ``MAX_LIVE`` keys per node stay valid: a node
asking again and again without ever using its keys cannot pile them up. A revoked node
loses every key at once. Each key is bound to its node: a node holding a valid key cannot
sign for another (``HmacVerifier.owner``).

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
MAX_LIVE = 4  # keys per node valid at once (issued, not yet superseded by a newer one)


@dataclass(frozen=True, slots=True)
class SessionKey:
    key_id: str
    node: str
    secret: bytes

    @property
    def secret_b64(self) -> str:
        return base64.b64encode(self.secret).decode("ascii")


class _SessionVerifier(HmacVerifier):
    """A session key's verifier, marked while its node is known to sign with it.

    Every message from a node asks whether it still uses the key it was last heard
    using; the mark answers without a lookup by node in a table of 100,000 (a fifth of
    resolving a key at that size). ``SessionKeys._use`` keeps it equal to
    ``_used[owner] == key_id`` for the verifier the table holds under that key id.
    """

    __slots__ = ("in_use",)

    def __init__(self, key: bytes, owner: str) -> None:
        super().__init__(key, owner)
        self.in_use = False


class SessionKeys:
    def __init__(self, grace_s: float = 10.0, *, hold_secrets: bool = True) -> None:
        self.grace_s = grace_s
        # A leader with edges issues keys but never verifies or signs with them (its
        # edges do): it keeps only who holds a session, not ~0.6 KB of HMAC state a key.
        self.hold_secrets = hold_secrets
        self._verifiers: dict[str, _SessionVerifier] = {}
        self._key_signers: dict[str, HmacSigner] = {}  # key id -> signer with that key
        self._live: dict[str, list[str]] = {}  # node -> key ids not superseded, oldest first
        self._used: dict[str, str] = {}  # node -> key id it was last heard using
        self._signers: dict[str, HmacSigner] = {}  # node -> signer of its commands
        self._superseded: set[str] = set()  # a newer key was used: retire after the grace
        self._retiring: dict[str, float] = {}  # key id -> when it stops verifying
        self._retired: dict[str, str] = {}  # key id -> node, oldest first
        self._stale: set[str] = set()  # nodes heard under a retired key since take_stale

    def issue(self, node: str, now: float, *, restarted: bool = False) -> SessionKey:
        """A new key for ``node``; the older ones stay valid until it uses this one.

        ``restarted``: the asking agent is a new process, which cannot hold any older key:
        they are superseded at once (valid for the grace only) and this one signs.
        """
        key = SessionKey("s" + secrets.token_hex(12), node, secrets.token_bytes(SESSION_KEY_BYTES))
        self.install(key, now, restarted=restarted)
        return key

    def install(self, key: SessionKey, now: float, *, restarted: bool = False) -> None:
        """Hold ``key`` as ``issue`` would have issued it: an edge (``server.edge``)
        verifies and signs with the keys its leader issued."""
        node = key.node
        if not self.hold_secrets:
            held = self._live.setdefault(node, [])
            held.append(key.key_id)
            del held[:-MAX_LIVE]
            return
        if restarted:
            self._superseded.update(self._live.pop(node, []))
            self._use(node, None)
        self._verifiers[key.key_id] = _SessionVerifier(key.secret, node)
        signer = self._key_signers[key.key_id] = HmacSigner(key.key_id, key.secret)
        live = self._live.setdefault(node, [])
        live.append(key.key_id)
        while len(live) > MAX_LIVE:
            self._retiring[live.pop(0)] = now + self.grace_s
        if self._used.get(node) not in live:
            # Not heard with a key it still holds: the newest is the best guess. Otherwise
            # the key it uses stays the signer; the agent trusts its previous key too.
            self._use(node, None)
            self._signers[node] = signer

    def signer(self, node: str) -> HmacSigner | None:
        """Signs commands to ``node``: with the key it was last heard using."""
        return self._signers.get(node)

    def revoke(self, node: str) -> bool:
        """Drop every key of ``node``; True if it had one."""
        # Its keys still valid: the live ones, and those superseded or retiring (a few,
        # for a grace), not a pass over every key of the fleet.
        passing = (kid for kid in (*self._superseded, *self._retiring) if self._owner(kid) == node)
        gone = [kid for kid in dict.fromkeys([*self._live.get(node, ()), *passing])]
        gone = [kid for kid in gone if kid in self._verifiers] if self.hold_secrets else gone
        for kid in gone:
            self._verifiers.pop(kid, None)
            self._key_signers.pop(kid, None)
            self._retiring.pop(kid, None)
            self._superseded.discard(kid)
            self._retire(kid, node)
        self._live.pop(node, None)
        self._use(node, None)
        self._signers.pop(node, None)
        return bool(gone)

    def _owner(self, key_id: str) -> str | None:
        verifier = self._verifiers.get(key_id)
        return None if verifier is None else verifier.owner

    def expire(self, now: float) -> None:
        for kid in self._superseded:
            self._retiring.setdefault(kid, now + self.grace_s)
        self._superseded.clear()
        for kid, until in list(self._retiring.items()):
            if until <= now:
                del self._retiring[kid]
                self._key_signers.pop(kid, None)
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
        node = verifier.owner
        if node is not None and not verifier.in_use:  # ``_used.get(node) != key_id``
            self._heard_using(node, key_id)
        return verifier

    def _heard_using(self, node: str, key_id: str) -> None:
        """``node`` signed with ``key_id``: it holds that key; older ones are superseded."""
        live = self._live.get(node, [])
        if key_id not in live:
            return  # a late message under a superseded key: the node has moved on
        self._use(node, key_id)
        self._signers[node] = self._key_signers[key_id]
        index = live.index(key_id)
        self._superseded.update(live[:index])
        del live[:index]

    def _use(self, node: str, key_id: str | None) -> None:
        """``node`` was last heard using ``key_id`` (None: not with a key it holds)."""
        old = self._used.pop(node, None)
        if old is not None and (verifier := self._verifiers.get(old)) is not None:
            verifier.in_use = False
        if key_id is not None:
            self._used[node] = key_id
            verifier = self._verifiers.get(key_id)
            if verifier is not None:
                verifier.in_use = True

    def take_stale(self) -> set[str]:
        """Nodes heard under a retired key since the last call (their session is over)."""
        stale, self._stale = self._stale, set()
        return stale

    def _retire(self, key_id: str, node: str) -> None:
        self._retired[key_id] = node
        if len(self._retired) > RETIRED_KEEP:
            del self._retired[next(iter(self._retired))]

    def nodes(self) -> list[str]:
        return list(self._live)

    def key_ids(self, node: str) -> list[str]:
        """The ids of ``node``'s keys not superseded, oldest first."""
        return list(self._live.get(node, ()))

    def has(self, node: str) -> bool:
        return node in self._live
