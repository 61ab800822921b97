"""Which nodes move when edges come and go: rendezvous hashing against modulo hashing.

    python bench/assignment.py [--nodes 100000] [--max-edges 16]

For N = 1 .. max-edges, the fraction of nodes whose edge changes when an edge is added
(N -> N+1) and when one is lost (N+1 -> N), with the edges' names as the leader gives
them; the goal is at most 1/(N+1) + 2 % moved on an addition. The same-run baseline is
the assignment a table-free design would reach for first, ``hash(node) mod N``, which
moves about N/(N+1) of the fleet. Then weighted edges (``[edge] capacity``): each edge's
share against its weight's, and what adding a heavy edge moves. And the cost: a pick per
node at discovery, in microseconds, unweighted and weighted, at the largest N.
"""

from __future__ import annotations

import argparse
import time
from hashlib import blake2b

from machine import describe  # bench/ is sys.path[0] when run as a script

from server.core import rendezvous

GOAL_SLACK = 0.02


def modulo(node: str, edges: list[str]) -> str:
    digest = blake2b(node.encode(), digest_size=8).digest()
    return edges[int.from_bytes(digest, "big") % len(edges)]


def moved(before: dict[str, str | None], after: dict[str, str | None]) -> float:
    return sum(1 for n, e in before.items() if after[n] != e) / len(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--max-edges", type=int, default=16)
    args = parser.parse_args()
    nodes = [f"node-{i:07d}" for i in range(args.nodes)]
    names = [f"server-e{i}" for i in range(args.max_edges + 1)]
    print(describe())
    print(f"{args.nodes:,} nodes\n")
    print(" N -> N+1   added: rendezvous  goal<=   modulo | lost: rendezvous (its share 1/(N+1))")
    failures = 0
    prev = {n: rendezvous.pick(n, names[:1]) for n in nodes}
    prev_mod = {n: modulo(n, names[:1]) for n in nodes}
    for count in range(1, args.max_edges + 1):
        grown = names[: count + 1]
        after = {n: rendezvous.pick(n, grown) for n in nodes}
        after_mod = {n: modulo(n, grown) for n in nodes}
        added, goal = moved(prev, after), 1 / (count + 1) + GOAL_SLACK
        lost = moved(after, prev)  # losing the newest edge: back to ``prev``
        failures += added > goal
        mod = moved(prev_mod, after_mod)
        print(
            f"{count:2d} -> {count + 1:2d}   {added:17.1%}  {goal:6.1%} {mod:8.1%}"
            f" | {lost:15.1%} ({1 / (count + 1):.1%})"
        )
        prev, prev_mod = after, after_mod

    weights = {"server-e0": 1.0, "server-e1": 1.0, "far-big": 2.0}
    edges = list(weights)
    placed = {n: rendezvous.pick(n, edges, weights) for n in nodes}
    total = sum(weights.values())
    print("\nweighted: edge, weight, share of nodes (expected)")
    for edge, weight in weights.items():
        share = sum(1 for e in placed.values() if e == edge) / len(nodes)
        failures += abs(share - weight / total) > GOAL_SLACK
        print(f"  {edge:10s} {weight:4.1f} {share:7.1%} ({weight / total:.1%})")
    grown_w = {**weights, "far-huge": 4.0}
    after_w = {n: rendezvous.pick(n, list(grown_w), grown_w) for n in nodes}
    share = 4.0 / sum(grown_w.values())
    added = moved(placed, after_w)
    onto = all(after_w[n] == "far-huge" for n in nodes if after_w[n] != placed[n])
    failures += added > share + GOAL_SLACK or not onto
    print(f"  adding far-huge (4.0): {added:.1%} moved, its share {share:.1%}, all onto it: {onto}")

    sample = nodes[:20_000]
    all_edges = names[: args.max_edges]
    even = dict.fromkeys(all_edges, 1.0) | {all_edges[0]: 2.0}
    for label, weighting in (("unweighted", None), ("weighted", even)):
        start = time.perf_counter()
        for n in sample:
            rendezvous.pick(n, all_edges, weighting)
        per = (time.perf_counter() - start) / len(sample) * 1e6
        print(f"\na pick over {len(all_edges)} edges, {label}: {per:.1f} us per node")
    print(f"\ngoals: {'all met' if not failures else f'{failures} NOT MET'}")


if __name__ == "__main__":
    main()
