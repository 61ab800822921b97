"""Which keys a node trusts: the server's Ed25519 key, and session keys for commands.

Everything a node hears is signed by the one server key pinned in its config (config
replies, heartbeats, commands), except that commands may also be signed with an HMAC
session key that config discovery handed out. An agent and the fleet simulator build
their key resolvers here; only where the session keys are kept differs (one node's
current and previous, or those of every simulated node).

Pure, and holds nothing: a killed process rebuilds its resolvers from its config at
start, and gets its session keys again from the next discovery.
"""

from __future__ import annotations

from collections.abc import Callable

from agent import ed25519
from keys import fingerprint
from keys.identity import PublicIdentity
from pushjobs.errors import UnknownKey
from pushjobs.protocol.framing import KeyResolver
from pushjobs.protocol.signing import HMAC_SHA256, Verifier

NOT_THE_SERVER = "not the server's key: {!r}"


def server_resolver(server: PublicIdentity) -> tuple[str, Verifier]:
    """The server's key id and verifier (bound to its name): all an agent ever trusts."""
    return fingerprint.key_id(server.ed25519_public), ed25519.verifier(
        server.ed25519_public, owner=server.name
    )


def trust_server(
    server: PublicIdentity, refusal: str = "not the server's key: {!r}"
) -> KeyResolver:
    """A resolver that knows the server's key and refuses any other with ``refusal``."""
    server_kid, verifier = server_resolver(server)

    def resolve(method: str, key_id: str) -> Verifier:
        if key_id != server_kid:
            raise UnknownKey(refusal.format(key_id[:32]))
        return verifier

    return resolve


def trust_sessions(
    session_key: Callable[[str], Verifier | None], server: KeyResolver, refusal: str
) -> KeyResolver:
    """HMAC key ids through ``session_key`` (``refusal`` if it has none), the rest ``server``."""

    def resolve(method: str, key_id: str) -> Verifier:
        if method == HMAC_SHA256:
            verifier = session_key(key_id)
            if verifier is None:
                raise UnknownKey(refusal.format(key_id[:32]))
            return verifier
        return server(method, key_id)

    return resolve
