"""Default locations of pushjobs' files, overridable with PUSHJOBS_HOME."""

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
    return home() / "keys"


def registry_path() -> Path:
    return Path(os.environ.get("PUSHJOBS_KEY_REGISTRY") or home() / "registry.json")


def log_path() -> Path:
    return Path(os.environ.get("PUSHJOBS_LOG") or home() / "log.db")
