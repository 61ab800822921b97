"""The CLI user's config file: which server to talk to, and with which key.

    [client]
    server = "tcp://10.0.0.5:7700"          # the server's API endpoint, or several:
    # server = ["tcp://10.0.0.5:7700", "tcp://10.0.0.6:7700"]   (the CLI follows the leader)
    server_key = "~/.config/pushjobs/server.pub"
    user_key = "~/.config/pushjobs/alice.key"  # private, mode 0600
    timeout_s = 10.0                        # seconds, at most 86400 (a day)

Found at ``--config``, else ``$PUSHJOBS_CONFIG``, else
``$XDG_CONFIG_HOME/pushjobs/config.toml`` (``~/.config/pushjobs/config.toml``). Every key
can be overridden from the environment (``PUSHJOBS_CLIENT__SERVER=...``; several
endpoints there, or in ``--server``, are separated by commas).

With several servers the client asks them in turn and follows the leader
(``pushjobs.api.client``); while none leads it waits, up to ``timeout_s``, and a command
run by a person says "waiting for a leader..." once on stderr.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pushjobs.api.client import ApiClient
from pushjobs.config import load_config
from pushjobs.errors import ConfigError

SAMPLE = """[client]
server = "tcp://127.0.0.1:7700"
server_key = "/etc/pushjobs/server.pub"
user_key = "~/.config/pushjobs/alice.key\""""


MAX_TIMEOUT_S = 86400.0
"""The longest ``timeout_s``: anything longer is a typo. inf and nan (TOML has both) are
refused too: they slip past a check for greater than 0 and break where the client turns
the timeout into a deadline."""


def split_endpoints(texts: Iterable[str]) -> list[str]:
    """The endpoints named in ``texts``, in order; each text may hold several, separated by
    commas or spaces."""
    return [e for text in texts for e in re.split(r"[,\s]+", text) if e]


@dataclass(frozen=True, slots=True)
class ClientSection:
    server: str | list[str] = ""
    server_key: Path | None = None
    user_key: Path | None = None
    timeout_s: float = 10.0

    def check(self) -> Iterable[tuple[str, str]]:
        if not (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S):
            yield (
                "timeout_s",
                f"must be a number of seconds greater than 0 and at most {MAX_TIMEOUT_S:.0f}, "
                f"not {self.timeout_s}",
            )

    def endpoints(self) -> list[str]:
        """Every server API endpoint named, in order (a string may hold several, by commas)."""
        return split_endpoints([self.server] if isinstance(self.server, str) else self.server)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    client: ClientSection = field(default_factory=ClientSection)


def default_path() -> Path:
    explicit = os.environ.get("PUSHJOBS_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "pushjobs" / "config.toml"


def load(path: Path | None, server: str | None = None) -> ClientSection:
    where = path or default_path()
    config = load_config(ClientConfig, where if where.exists() or path else None)
    section = config.client
    endpoint: str | list[str] = server or section.server
    missing = [
        name
        for name, value in (
            ("server", ClientSection(endpoint).endpoints()),
            ("server_key", section.server_key),
            ("user_key", section.user_key),
        )
        if not value
    ]
    if missing:
        raise ConfigError(
            f"the CLI needs client.{missing[0]}; create {where} like this:\n{SAMPLE}",
            path=str(where),
        )
    return ClientSection(endpoint, section.server_key, section.user_key, section.timeout_s)


def connect(path: Path | None, server: str | None = None) -> ApiClient:
    section = load(path, server)
    assert section.server_key is not None and section.user_key is not None
    for name, key_file in (("server_key", section.server_key), ("user_key", section.user_key)):
        # A setting naming no file is the config's fault (exit code 9), not a missing input.
        if not Path(key_file).exists():
            raise ConfigError(
                f"{key_file}: no such key file",
                path=str(path or default_path()),
                key=f"client.{name}",
            )
    return ApiClient.from_files(
        section.endpoints(),
        section.server_key,
        section.user_key,
        timeout_s=section.timeout_s,
        on_wait=_tell,
    )


def _tell(text: str) -> None:
    """A line for the person at the terminal (stderr: stdout may be JSON for a script)."""
    print(text, file=sys.stderr, flush=True)
