"""Which edge serves which node: rendezvous (highest random weight) hashing. Pure.

Every (edge, node) pair gets a pseudo-random score from a hash of both names; a node
belongs to the live edge with the highest score. Losing an edge moves only the nodes it
held (each to its next best), and adding one takes from every other edge only the nodes
that now score highest on it: about 1/(N+1) of the fleet, the least any assignment can
move. No table is kept: any process that knows the live edges computes the same answer.

``blake2b`` with an 8-byte digest: a few hundred nanoseconds a pair, computed once per
node at discovery, never per message.

Weighted (an edge's stated capacity, ``pushjobs-edge``'s ``capacity``): the score becomes
``-w / ln(u)``, ``u`` the pair's hash as a fraction in (0, 1), which gives each edge a
share of the nodes in proportion to its weight and keeps the minimal-movement property
(Schindelhauer and Schomaker's weighted rendezvous). With every weight equal it orders
the edges exactly as the unweighted score does, so equal weights pick the same edges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from hashlib import blake2b

_SPAN = float(2**64 + 1)
MIN_CAPACITY, MAX_CAPACITY = 0.01, 1000.0
"""The weights an edge may state: a hundredth to a thousand times an ordinary edge."""


def score(edge: str, node: str) -> int:
    digest = blake2b(f"{edge}\x00{node}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def weighted(edge: str, node: str, weight: float) -> float:
    """The pair's score under ``weight`` (> 0): ``-weight / ln(u)``, ``u`` in (0, 1)."""
    return -weight / math.log((score(edge, node) + 1) / _SPAN)


def pick(node: str, edges: Iterable[str], weights: Mapping[str, float] | None = None) -> str | None:
    """The edge ``node`` belongs to among ``edges``; None when there is none. With
    ``weights`` (missing: 1.0), each edge takes a share in proportion to its weight."""
    if weights:
        return _pick_weighted(node, edges, weights)
    best: str | None = None
    best_score = -1
    for edge in edges:
        s = score(edge, node)
        # Ties (2^-64) go to the smaller name, so every process agrees.
        if s > best_score or (s == best_score and best is not None and edge < best):
            best, best_score = edge, s
    return best


def _pick_weighted(node: str, edges: Iterable[str], weights: Mapping[str, float]) -> str | None:
    best: str | None = None
    best_score = -math.inf
    for edge in edges:
        s = weighted(edge, node, weights.get(edge, 1.0))
        if s > best_score or (s == best_score and best is not None and edge < best):
            best, best_score = edge, s
    return best
