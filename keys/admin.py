"""Key administration over a registry, as salt-key does it: names, globs, ``all``.

Shared by the server (``pushjobs key`` through the API, ``server/front/keymethods.py``) and the
CLI's local mode (a registry file named with ``--registry``, or a server's log with
``--server-config``), so both expand patterns and report results the same way. A pattern
with ``*``, ``?`` or ``[`` is a shell glob over the registered names; a glob that matches
nothing is an error, never a silent success; a name a glob matched that is already where
the action leads (accepted, for accept) is left as it is and reported so, while one named
exactly is an error. Each name gets its own result (previous state, new state, or its
error, with ``code: not_found`` for an unknown name): one bad name does not stop the
others.

Killed at any line: every change is one atomic registry write (a locked file, ``keys.filestore``,
or one append to the log, ``keys.topicstore``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any, Final

from keys.entry import Entry
from keys.identity import PublicIdentity
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import KeyFileError, NotFound, PushJobsError, UnknownIdentity

GLOB_CHARS: Final = frozenset("*?[")
ACTIONS: Final = ("accept", "reject", "delete")
# The state an action leads to, for telling "already so" from a change.
ALREADY: Final = {"accept": KeyState.ACCEPTED, "reject": KeyState.REJECTED}
STATES: Final = frozenset(state.value for state in KeyState)


def row(entry: Entry) -> dict[str, Any]:
    """An entry as the CLI and the API show it."""
    return {
        "name": entry.name,
        "kind": entry.kind,
        "role": entry.role,
        "state": entry.state.value,
        "fingerprint": entry.fingerprint,
        "curve_public": entry.curve_public,
        "attempts": entry.attempts,
        "updated_ms": entry.updated_ms,
    }


def rows(registry: KeyRegistry, state: str | None, pattern: str | None) -> list[dict[str, Any]]:
    if state is not None and state not in STATES:
        raise KeyFileError(f"unknown key state {state!r}: one of {', '.join(sorted(STATES))}")
    return [
        row(e)
        for e in registry.list(state)
        if pattern is None or fnmatch.fnmatchcase(e.name, pattern)
    ]


def show(registry: KeyRegistry, name: str) -> dict[str, Any]:
    """The name's main entry and the denied entry folded under it, if any."""
    main = registry.find(name)
    if main is None:
        raise NotFound(f"no key named {name!r}")
    denied = [e for e in registry.list(KeyState.DENIED) if e.name == name]
    return {"key": row(main), "denied": [row(e) for e in denied]}


def expand(registry: KeyRegistry, names: list[str], everything: bool) -> list[str]:
    """The names a request means, in order, each once; ``everything``: every pending key."""
    if everything:
        pending = [e.name for e in registry.list(KeyState.PENDING)]
        if not pending:
            raise NotFound("no pending keys")
        return pending
    known = list(dict.fromkeys(e.name for e in registry.entries()))
    out: dict[str, None] = {}
    for pattern in names:
        if GLOB_CHARS.isdisjoint(pattern):
            out[pattern] = None  # an unknown exact name gets its own error
            continue
        matched = [n for n in known if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise NotFound(f"no key matches {pattern!r}")
        out.update(dict.fromkeys(matched))
    return list(out)


def move(
    registry: KeyRegistry, action: str, names: list[str], everything: bool
) -> list[dict[str, Any]]:
    """Accept, reject (revoke) or delete each name; one result per name."""
    if action not in ACTIONS:
        raise KeyFileError(f"unknown key action {action!r}")
    if everything and action != "accept":
        raise KeyFileError("--all is only for accept (every pending key)")
    change: Callable[[list[str]], list[Entry]] = getattr(registry, action)
    target = ALREADY.get(action)
    exact = {n for n in names if GLOB_CHARS.isdisjoint(n)}
    results: list[dict[str, Any]] = []
    for name in expand(registry, names, everything):
        before = registry.find(name)
        if before is not None and before.state is target and name not in exact:
            # A glob over a mix ('web-*': some pending, some accepted) means "those not
            # yet so": one already so is left as it is, not an error.
            state = before.state.value
            results.append({"name": name, "ok": True, "previous": state, "state": state})
            continue
        try:
            after = change([name])
        except PushJobsError as exc:
            failed = {"name": name, "ok": False, "error": str(exc)}
            if isinstance(exc, NotFound | UnknownIdentity):
                failed["code"] = "not_found"  # the CLI's exit 8 when nothing else happened
            results.append(failed)
            continue
        previous = (before or after[0]).state.value
        state = "deleted" if action == "delete" else after[0].state.value
        results.append({"name": name, "ok": True, "previous": previous, "state": state})
    return results


def add(
    registry: KeyRegistry, public: PublicIdentity, role: str | None, accept: bool
) -> dict[str, Any]:
    state = KeyState.ACCEPTED if accept else KeyState.PENDING
    return row(registry.add(public, state=state, role=role))


def set_role(registry: KeyRegistry, name: str, role: str) -> dict[str, Any]:
    return row(registry.set_role(name, role))
