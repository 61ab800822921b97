"""Which edge serves which node: rendezvous (highest random weight) hashing. Pure.

Every (edge, node) pair gets a pseudo-random score from a hash of both names; a node
belongs to the live edge with the highest score. Losing an edge moves only the nodes it
held (each to its next best), and adding one takes from every other edge only the nodes
that now score highest on it: about 1/(N+1) of the fleet, the least any assignment can
move. No table is kept: any process that knows the live edges computes the same answer.

``blake2b`` with an 8-byte digest: a few hundred nanoseconds a pair, computed once per
node at discovery, never per message.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b


def score(edge: str, node: str) -> int:
    digest = blake2b(f"{edge}\x00{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pick(node: str, edges: Iterable[str]) -> str | None:
    """The edge ``node`` belongs to among ``edges``; None when there is none."""
    best: str | None = None
    best_score = -1
    for edge in edges:
        s = score(edge, node)
        # Ties (2^-64) go to the smaller name, so every process agrees.
        if s > best_score or (s == best_score and best is not None and edge < best):
            best, best_score = edge, s
    return best
