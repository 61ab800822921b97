"""Where ``pushjobs key`` acts: the server, through its API, or a registry opened locally.

An operator's keys live with the server (the ordered log's ``keys`` topic, or with
``key_store = "file"`` its ``server.registry`` file), often on another host. So with a
client config (the one ``pushjobs job`` uses), the key commands ask the server, which needs
the ``admin`` role; the server expands globs and ``--all`` against its own registry.

A registry is opened directly only when named:

- ``--server-config SERVER_TOML``: the registry of the server that config describes, as
  that server reads it: its log (``[log]``), or its file with ``key_store = "file"``. For
  an admin locked out, or a server that is down. A registry file beside a ``keys`` topic
  that never held a record is imported first, as the server would at its start. The write
  is not fenced (this is not a server): a change to a name the leader changes at the
  same instant is the one case where the last write wins.
- ``--registry FILE`` or ``$PUSHJOBS_KEY_REGISTRY`` (bootstrapping the first admin on the
  server's host before its first start: the server imports the file then), or, with
  neither and no client config, the default file under ``$PUSHJOBS_HOME`` (one machine,
  the quickstart layout). A file a server has imported is refused: it is no longer the
  registry (``keys.importer``). The variable, often left over from that bootstrap, gives
  way to a client config once its file was imported: the server is asked, and told so.

Every output says which.

Both targets answer in the same shapes: rows of key fields, and one result per name for
accept, reject and delete. A command takes the answer apart inside ``reading()``: for the
server, ``reading_reply``, so that a reply of another shape is one line and exit code 10;
for a registry read here, nothing (an error there is a bug of ours, not a reply).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from keys import admin
from keys.identity import PublicIdentity, b64
from keys.importer import import_once, imported_path, refuse_imported
from keys.registry import KeyRegistry
from keys.topicstore import LogStore
from pushjobs import paths
from pushjobs.api.client import ApiClient
from pushjobs.cli import userconfig
from pushjobs.cli.render import reading_reply
from pushjobs.config import load_table, read_toml
from pushjobs.errors import ConfigError
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import KEYS


class Keys(Protocol):
    @property
    def where(self) -> str: ...

    def reading(self) -> contextlib.AbstractContextManager[None]: ...

    def rows(self, state: str | None, pattern: str | None) -> list[dict[str, Any]]: ...

    def show(self, name: str) -> dict[str, Any]: ...

    def move(self, action: str, names: list[str], everything: bool) -> list[dict[str, Any]]: ...

    def add(self, public: PublicIdentity, role: str | None, accept: bool) -> dict[str, Any]: ...

    def set_role(self, name: str, role: str) -> dict[str, Any]: ...


@dataclass
class LocalKeys:
    registry: KeyRegistry
    notes: list[str] = field(default_factory=list)  # said once, on stderr

    @property
    def where(self) -> str:
        path = self.registry.path
        return f"registry file {path}" if path is not None else self.registry.where

    def reading(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

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
    notes: list[str] = field(default_factory=list)  # said once, on stderr

    @property
    def where(self) -> str:
        return f"server {self.client.endpoint}"

    def reading(self) -> contextlib.AbstractContextManager[None]:
        return reading_reply()

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
def target(
    registry: Path | None,
    config: Path | None,
    server: str | None,
    server_config: Path | None = None,
) -> Iterator[Keys]:
    """The server when a client config exists, else a registry opened locally (see the
    docstring)."""
    from_env = None if registry is not None else _env_path("PUSHJOBS_KEY_REGISTRY")
    has_client = config is not None or server is not None or userconfig.default_path().exists()
    # The variable is often left over from bootstrapping the first admin: once a server
    # has imported that file, a client config means the server's registry.
    left_over = from_env is not None and has_client and imported_path(from_env).exists()
    if server_config is not None:
        with server_registry(server_config) as keys:
            yield keys
    elif registry is not None:
        yield file_keys(registry)
    elif from_env is not None and not left_over:
        yield file_keys(from_env)
    elif has_client:
        client = userconfig.connect(config, server)
        try:
            remote = RemoteKeys(client)
            if left_over:
                remote.notes.append(
                    f"PUSHJOBS_KEY_REGISTRY names {from_env}, which a server imported into "
                    f"the ordered log: asking the server instead (unset the variable to "
                    "silence this)"
                )
            yield remote
        finally:
            client.close()
    else:
        yield file_keys(paths.registry_path())


def file_keys(path: Path) -> LocalKeys:
    """A registry file, unless a server imported it (then it is not the registry)."""
    refuse_imported(path)
    return LocalKeys(KeyRegistry(path))


@contextlib.contextmanager
def server_registry(server_config: Path) -> Iterator[LocalKeys]:
    """The registry the server of ``server_config`` reads: its log, or its file."""
    # Only two keys of [server] matter here; the server's own checks judge the rest.
    table = read_toml(server_config).get("server", {})
    if not isinstance(table, dict):
        raise ConfigError("expected a table", path=str(server_config), key="server")
    file = Path(table["registry"]).expanduser() if "registry" in table else paths.registry_path()
    store = table.get("key_store", "log")
    if store == "file":
        yield file_keys(file)
        return
    if store != "log":
        raise ConfigError(
            "must be one of log, file", path=str(server_config), key="server.key_store"
        )
    settings = load_table(LogSettings, server_config, "log")
    topic = settings.topic_prefix + KEYS.suffix
    handle = open_log(settings)
    try:
        handle.create_topic(topic, KEYS.policy)
        done = import_once(handle, topic, file)
        keys = LocalKeys(KeyRegistry(LogStore(handle, topic)))
        if done is not None:
            keys.notes.append(
                f"imported {done.entries} entries from {done.path} into {topic} first "
                "(as the server would at its start)"
            )
        yield keys
    finally:
        handle.close()


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None
