"""Which nodes a job targets: names, globs and attribute queries over reported facts. Pure.

Each selector picks a set of nodes; a job targets the union of its selectors.

    web-01                  that node (it need not be known: it will be unavailable)
    web-*  db-[12]          glob over known node names
    os=linux                nodes whose fact ``os`` matches (the value may be a glob)
    tag=web                 nodes that carry the tag ``web``
    os=linux,tag=eu-*       every term must match (AND)

A selector that matches nothing is reported, so an operator's typo is not a silent no-op.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pushjobs.errors import TargetError

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    facts: Mapping[str, str] = field(default_factory=dict)
    tags: Sequence[str] = ()


def _term_matches(node: NodeFacts, key: str, pattern: str) -> bool:
    if key in ("tag", "tags"):
        return any(fnmatch.fnmatchcase(tag, pattern) for tag in node.tags)
    if key == "name":
        return fnmatch.fnmatchcase(node.name, pattern)
    value = node.facts.get(key)
    return value is not None and fnmatch.fnmatchcase(value, pattern)


def select(selectors: Iterable[str], nodes: Iterable[NodeFacts]) -> list[str]:
    """Names targeted by ``selectors``, in first-match order; TargetError if one matches none."""
    known = list(nodes)
    chosen: dict[str, None] = {}
    for raw in selectors:
        selector = raw.strip()
        if not selector:
            raise TargetError("empty node selector")
        if "=" in selector:
            terms = []
            for term in selector.split(","):
                key, sep, pattern = term.partition("=")
                if not sep or not key.strip() or not pattern.strip():
                    raise TargetError(f"bad query term {term!r} in {selector!r}: use key=value")
                terms.append((key.strip(), pattern.strip()))
            hits = [n.name for n in known if all(_term_matches(n, k, p) for k, p in terms)]
        elif _GLOB_CHARS & set(selector):
            hits = [n.name for n in known if fnmatch.fnmatchcase(n.name, selector)]
        else:
            hits = [selector]
        if not hits:
            raise TargetError(f"no node matches {selector!r}")
        chosen.update(dict.fromkeys(hits))
    if not chosen:
        raise TargetError("no node selected")
    return list(chosen)
