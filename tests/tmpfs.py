"""A directory on a real tmpfs of its own, to fill up or make read-only under a daemon.

Mounting needs root (or CAP_SYS_ADMIN); elsewhere ``mounted`` skips the test, saying so.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def run_command(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@contextlib.contextmanager
def mounted(parent: Path, prefix: str, size_bytes: int) -> Iterator[Path]:
    """A fresh tmpfs of ``size_bytes`` under ``parent``, unmounted (lazily) at the end."""
    mount = parent / f"{prefix}-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = run_command("mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        run_command("mount", "-o", "remount,rw", str(mount))
        run_command("umount", "-l", str(mount))


def fill(directory: Path) -> Path:
    """Write zeros until the file system is full; the file, to delete to free it."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as fh:
        for size in (65536, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * size)
    return filler


def set_readonly(directory: Path, readonly: bool) -> None:
    done = run_command("mount", "-o", "remount,ro" if readonly else "remount,rw", str(directory))
    assert done.returncode == 0, done.stderr
