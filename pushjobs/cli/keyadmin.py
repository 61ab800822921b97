"""Where ``pushjobs key`` acts: the server, through its API, or a registry file named locally.

An operator's keys live with the server (its ``server.registry`` setting), often on
another host. So with a client config (the one ``pushjobs job`` uses), the key commands
ask the server, which needs the ``admin`` role; the server expands globs and ``--all``
against its own registry. A registry file is used directly only when named: ``--registry
FILE`` or ``$PUSHJOBS_KEY_REGISTRY`` (bootstrapping the first admin on the server's host,
or a server that is down), or, with neither and no client config, the default file under
``$PUSHJOBS_HOME`` (one machine, the quickstart layout). Every output says which.

Both targets answer in the same shapes: rows of key fields, and one result per name for
accept, reject and delete.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from keys import admin
from keys.identity import PublicIdentity, b64
from keys.registry import KeyRegistry
from pushjobs import paths
from pushjobs.api.client import ApiClient
from pushjobs.cli import userconfig


class Keys(Protocol):
    @property
    def where(self) -> str: ...

    def rows(self, state: str | None, pattern: str | None) -> list[dict[str, Any]]: ...

    def show(self, name: str) -> dict[str, Any]: ...

    def move(self, action: str, names: list[str], everything: bool) -> list[dict[str, Any]]: ...

    def add(self, public: PublicIdentity, role: str | None, accept: bool) -> dict[str, Any]: ...

    def set_role(self, name: str, role: str) -> dict[str, Any]: ...


@dataclass
class LocalKeys:
    registry: KeyRegistry

    @property
    def where(self) -> str:
        return f"registry file {self.registry.path}"

    def rows(self, state: str | None, pattern: str | None) -> list[dict[str, Any]]:
        return admin.rows(self.registry, state, pattern)

    def show(self, name: str) -> dict[str, Any]:
        return admin.show(self.registry, name)

    def move(self, action: str, names: list[str], everything: bool) -> list[dict[str, Any]]:
        return admin.move(self.registry, action, names, everything)

    def add(self, public: PublicIdentity, role: str | None, accept: bool) -> dict[str, Any]:
        return admin.add(self.registry, public, role, accept)

    def set_role(self, name: str, role: str) -> dict[str, Any]:
        return admin.set_role(self.registry, name, role)


@dataclass
class RemoteKeys:
    client: ApiClient

    @property
    def where(self) -> str:
        return f"server {self.client.endpoint}"

    def rows(self, state: str | None, pattern: str | None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("state", state), ("pattern", pattern)) if v is not None}
        keys: list[dict[str, Any]] = self.client.call("key.list", params)["keys"]
        return keys

    def show(self, name: str) -> dict[str, Any]:
        shown: dict[str, Any] = self.client.call("key.show", {"name": name})
        return shown

    def move(self, action: str, names: list[str], everything: bool) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"all": True} if everything else {"names": names}
        results: list[dict[str, Any]] = self.client.call(f"key.{action}", params)["results"]
        return results

    def add(self, public: PublicIdentity, role: str | None, accept: bool) -> dict[str, Any]:
        params = {
            "name": public.name,
            "kind": public.kind,
            "ed25519_public": b64(public.ed25519_public),
            "curve_public": public.curve_public,
            "role": role,
            "accept": accept,
        }
        added: dict[str, Any] = self.client.call("key.add", params)["key"]
        return added

    def set_role(self, name: str, role: str) -> dict[str, Any]:
        changed: dict[str, Any] = self.client.call("key.role", {"name": name, "role": role})["key"]
        return changed


@contextlib.contextmanager
def target(registry: Path | None, config: Path | None, server: str | None) -> Iterator[Keys]:
    """The server when a client config exists, else a registry file (see the docstring)."""
    explicit = registry or _env_path("PUSHJOBS_KEY_REGISTRY")
    if explicit is not None:
        yield LocalKeys(KeyRegistry(explicit))
    elif config is not None or server is not None or userconfig.default_path().exists():
        client = userconfig.connect(config, server)
        try:
            yield RemoteKeys(client)
        finally:
            client.close()
    else:
        yield LocalKeys(KeyRegistry(paths.registry_path()))


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None
