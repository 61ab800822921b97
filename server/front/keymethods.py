"""The server half of ``pushjobs key``: the registry managed through the API (role admin).

An admin names keys as salt-key takes them (names, globs, ``all`` for accept); they are
expanded here, against the registry the server itself uses (``keys.admin``), so the admin
never needs the server's files or host. Role checks happen before a handler is called
(``pushjobs.api.methods``: every ``key.*`` method needs ``admin``).

Over the ordered log (``server/shell/keyregistry.py``) only the leader changes keys: a standby
answers a change ``not_leader``, which sends the CLI on to the leader; it still lists and
shows them.

Killed at any line: every change is one atomic registry write (a locked file, or one
append to the log); the admin's CLI reports what the reply said, or that no reply came.
"""

from __future__ import annotations

from base64 import b64decode
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from keys import admin
from keys.identity import PublicIdentity, check_kind
from keys.registry import KeyRegistry
from pushjobs.api import methods
from pushjobs.errors import ApiError, KeyFileError, KeyRequestError

Handler = Callable[[Mapping[str, Any], str], Any]


def _bad(message: str) -> ApiError:
    return ApiError(message, code=methods.BAD_REQUEST)


def _text(params: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise _bad(f"'{name}' must be a non-empty string")
    return value


class HasRegistry(Protocol):
    registry: KeyRegistry


class KeyAdmin:
    """The ``key.*`` handlers over the registry of ``holder`` (the server's backend), read
    at each call."""

    def __init__(self, holder: HasRegistry) -> None:
        self.holder = holder

    @property
    def registry(self) -> KeyRegistry:
        return self.holder.registry

    def table(self) -> dict[str, Handler]:
        return {
            "key.list": self.list,
            "key.show": lambda p, c: admin.show(self.registry, str(_text(p, "name"))),
            "key.accept": lambda p, c: self._move("accept", p),
            "key.reject": lambda p, c: self._move("reject", p),
            "key.delete": lambda p, c: self._move("delete", p),
            "key.add": self.add,
            "key.role": self.role,
        }

    def list(self, params: Mapping[str, Any], caller: str) -> Any:
        state = _text(params, "state", required=False)
        pattern = _text(params, "pattern", required=False)
        if state is not None and state not in admin.STATES:
            raise _bad(f"'state' must be one of {', '.join(sorted(admin.STATES))}")
        return {"keys": admin.rows(self.registry, state, pattern)}

    def role(self, params: Mapping[str, Any], caller: str) -> Any:
        self._leader()
        name, role = str(_text(params, "name")), str(_text(params, "role"))
        try:
            return {"key": admin.set_role(self.registry, name, role)}
        except KeyRequestError as exc:  # a role for a node's key: asked wrongly (exit 2)
            raise _bad(str(exc)) from None

    def add(self, params: Mapping[str, Any], caller: str) -> Any:
        self._leader()
        try:
            public = PublicIdentity(
                str(_text(params, "name")),
                check_kind(str(_text(params, "kind"))),
                b64decode(str(_text(params, "ed25519_public")), validate=True),
                str(_text(params, "curve_public")),
            )
        except (ValueError, KeyFileError) as exc:
            raise _bad(f"not a public key: {exc}") from None
        role = _text(params, "role", required=False)
        try:
            return {"key": admin.add(self.registry, public, role, params.get("accept") is True)}
        except KeyRequestError as exc:  # a role for a node's key: asked wrongly (exit 2)
            raise _bad(str(exc)) from None

    def _leader(self) -> None:
        """Changes to a registry in the log are the leader's (``server/shell/keyregistry.py``): a
        standby says so, and the CLI asks the next server."""
        if not self.registry.writable():
            raise ApiError(
                "this server is not the leader; key changes go to the leader",
                code=methods.NOT_LEADER,
            )

    def _move(self, action: str, params: Mapping[str, Any]) -> Any:
        self._leader()
        everything = params.get("all") is True
        names = params.get("names") or []
        if not everything and (
            not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names)
        ):
            raise _bad("'names' must be a non-empty list of names or globs (or all: true)")
        return {"results": admin.move(self.registry, action, list(names), everything)}
