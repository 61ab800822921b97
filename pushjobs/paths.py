"""Default locations of pushjobs' files: one home directory, overridable per file by env."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """$PUSHJOBS_HOME, else $XDG_DATA_HOME/pushjobs, else ~/.local/share/pushjobs."""
    explicit = os.environ.get("PUSHJOBS_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "pushjobs"


def keys_dir() -> Path:
    """Where ``pushjobs key gen`` writes NAME.key and NAME.pub."""
    return home() / "keys"


def registry_path() -> Path:
    """$PUSHJOBS_KEY_REGISTRY, else home()/registry.json: the server and the CLI agree."""
    return Path(os.environ.get("PUSHJOBS_KEY_REGISTRY") or home() / "registry.json")


def log_path() -> Path:
    """$PUSHJOBS_LOG, else home()/log.db: the sqlite ordered log."""
    return Path(os.environ.get("PUSHJOBS_LOG") or home() / "log.db")


SYSTEM_HOME = Path("/var/lib/pushjobs")


def config_dir() -> Path:
    """$PUSHJOBS_CONFIG_DIR, else /etc/pushjobs: where the daemons look for their config
    (``server.toml``, ``agent.toml``) when no ``--config`` names one."""
    return Path(os.environ.get("PUSHJOBS_CONFIG_DIR") or "/etc/pushjobs").expanduser()


def default_config(name: str) -> Path | None:
    """``config_dir()/name`` if that file exists, else None (built-in defaults)."""
    path = config_dir() / name
    return path if path.exists() else None


def state_home(euid: int | None = None) -> Path:
    """Where a daemon keeps its state: $PUSHJOBS_HOME, else /var/lib/pushjobs when it runs
    as root (a system service, not a login), else ``home()``."""
    if os.environ.get("PUSHJOBS_HOME"):
        return home()
    uid = os.geteuid() if euid is None else euid
    return SYSTEM_HOME if uid == 0 else home()


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable: its entry is flushed too."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
