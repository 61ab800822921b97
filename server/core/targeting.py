"""Which nodes a job targets: names, globs and attribute queries over reported facts. Pure.

Each selector picks a set of nodes; a job targets the union of its selectors.

    web-01                  that node: registered, or reported since the server started
                            (an offline one is unavailable; a name nobody knows is refused)
    web-*  db-[12]          glob over known node names
    os=linux                nodes whose fact ``os`` matches (the value may be a glob)
    tag=web                 nodes that carry the tag ``web``
    os=linux,tag=eu-*       every term must match (AND)

A selector that matches nothing is reported, so an operator's typo is not a silent no-op;
names that no node has are all named at once, before any job exists.

Right after a takeover the new leader has not heard most of its fleet yet: the caller
passes those nodes' names (``unheard``: known to the previous leader, or registered) and
globs and ``name=`` match them too, so ``web-*`` means the same fleet it meant a moment
before. Their facts and tags are not known yet: other queries match only nodes heard.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pushjobs.errors import NotFound, TargetError

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


def select(
    selectors: Iterable[str],
    nodes: Iterable[NodeFacts],
    *,
    exists: Callable[[str], bool],
    unheard: Iterable[str] = (),
) -> list[str]:
    """Names targeted by ``selectors``, in first-match order.

    ``TargetError`` if a selector is malformed; ``NotFound`` if one matches none, naming every
    plain name that is neither a reported node nor one ``exists`` knows (the registry).
    ``unheard`` names count as nodes whose facts are not known yet.
    """
    known = list(nodes)
    reported = {n.name for n in known}
    for name in unheard:
        if name not in reported:
            reported.add(name)
            known.append(NodeFacts(name))
    unknown: list[str] = []
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
            if selector not in reported and not exists(selector):
                unknown.append(selector)
        if not hits:
            raise NotFound(f"no node matches {selector!r} (see pushjobs node list)")
        chosen.update(dict.fromkeys(hits))
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise NotFound(f"no node named {names} (see pushjobs node list)")
    if not chosen:
        raise TargetError("no node selected")
    return list(chosen)
