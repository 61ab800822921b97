"""Atomic file writes: a reader sees the old file or the new one, never a part of either.

The data goes to a fresh temporary file in the same directory, created with its final
mode (``O_EXCL``, so a private file is never readable by others, not even for an
instant), is fsynced, then renamed over the target (or hard-linked to it, which fails if
the target exists, when replacing is not allowed), and the directory is fsynced so the
rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from pushjobs.errors import KeyFileError


def write_atomic(
    path: Path, data: bytes, mode: int, *, replace: bool = True, min_mtime_ns: int = 0
) -> os.stat_result:
    """Write ``data`` to ``path``; return the new file's stat, taken before it went live.

    ``min_mtime_ns`` lets a caller keep modification times strictly increasing, which
    coarse file system clocks alone do not guarantee.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot write: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fd, mode)  # the umask may have narrowed it; never widens a private one
            st = os.fstat(fd)
            if st.st_mtime_ns < min_mtime_ns:
                os.utime(fd, ns=(st.st_atime_ns, min_mtime_ns))
                st = os.fstat(fd)
            os.fsync(fd)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
        _fsync_dir(path.parent)
    except FileExistsError:
        raise KeyFileError(f"{path}: already exists (use --force to replace it)") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot write: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):  # gone already once renamed
            os.unlink(tmp)
    return st


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
