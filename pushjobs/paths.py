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
