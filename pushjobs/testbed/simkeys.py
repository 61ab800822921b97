"""Keys of simulated nodes, derived from a seed so that enrolment and simulation agree.

Each simulated node has its own Ed25519 identity (it signs its config requests, and the
registry holds one entry per node, as for real agents). All nodes of a simulated fleet
share one CurveZMQ key: a simulator process serves every node it plays on one command
socket, and a CurveZMQ server socket has exactly one key, so the server keeps one command
socket per simulator process (one per distinct endpoint and key).

The keys are a function of the seed: whoever knows the seed can act as any simulated
node. That is the point for a benchmark, and the reason a real registry accepts them only
when an admin enrols them explicitly (``pushjobs simulate enroll``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from keys import z85
from keys.identity import PrivateIdentity, PublicIdentity, ed25519_public_of

DEFAULT_PREFIX = "sim-"
DEFAULT_SEED = "pushjobs-simulator"


def node_name(prefix: str, index: int) -> str:
    return f"{prefix}{index:05d}"


def curve_secret(seed: str) -> str:
    raw = hashlib.sha256(b"pushjobs-sim/curve/" + seed.encode()).digest()
    return z85.encode(raw)


def ed25519_seed(seed: str, name: str) -> bytes:
    return hashlib.sha256(b"pushjobs-sim/ed25519/" + seed.encode() + b"/" + name.encode()).digest()


class SimKeys:
    """Derives the identities of the simulated nodes named ``prefix + index``."""

    def __init__(self, seed: str = DEFAULT_SEED, prefix: str = DEFAULT_PREFIX) -> None:
        self.seed = seed
        self.prefix = prefix
        self.curve_secret = curve_secret(seed)
        # One node built the slow way fixes the shared CurveZMQ public key.
        self.curve_public = PrivateIdentity.from_secrets(
            node_name(prefix, 0), "node", ed25519_seed(seed, "x"), self.curve_secret
        ).public.curve_public

    def private(self, index: int) -> PrivateIdentity:
        name = node_name(self.prefix, index)
        secret = ed25519_seed(self.seed, name)
        public = PublicIdentity(name, "node", ed25519_public_of(secret), self.curve_public)
        return PrivateIdentity(public, secret, self.curve_secret)

    def publics(self, first: int, count: int) -> Iterator[PublicIdentity]:
        for index in range(first, first + count):
            name = node_name(self.prefix, index)
            secret = ed25519_seed(self.seed, name)
            yield PublicIdentity(name, "node", ed25519_public_of(secret), self.curve_public)
