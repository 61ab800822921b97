"""The one-time import of a registry file into the ordered log's ``keys`` topic.

Theory of operation. An installation that kept its registry in ``registry.json`` (and the
docs/fleet.md's first step, which adds the first admin to that file before any server runs) moves
to the log when a server starts on a ``keys`` topic that has never held a record: every
entry is written as it is (state, role, attempts, times), one record per name, in one
append; then the file is renamed ``registry.json.imported``. The rename is the marker:
no server reads the file again (the topic is not empty any more, and the file is gone),
and ``pushjobs key --registry FILE`` sees ``FILE.imported`` beside it and says where the
keys went, without opening the log. The renamed file stays as a copy of what was
imported.

"Never held a record" is the topic's end offset, not its live keys: a registry whose every
name was deleted must not come back from an old file.

Killed at any line: before the append, nothing happened and the next start imports; after
it and before the rename, the topic is not empty, so the file is not imported twice (it
is renamed at the next start that finds it beside a non-empty topic).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from keys.filestore import RegistryFile
from keys.topicstore import changes
from pushjobs.errors import KeyFileError
from pushjobs.log.base import OrderedLog

log = logging.getLogger("pushjobs.keys")

IMPORTED_SUFFIX = ".imported"


def imported_path(path: Path) -> Path:
    """Where an imported registry file is moved to."""
    return path.with_name(path.name + IMPORTED_SUFFIX)


@dataclass(frozen=True, slots=True)
class Imported:
    path: Path
    entries: int
    names: int
    renamed_to: Path | None  # None: the rename failed (said in the log)


def import_once(log_: OrderedLog, topic: str, path: Path) -> Imported | None:
    """Import ``path`` into ``topic`` if the topic never held a record; None if not."""
    if log_.end_offset(topic) > 0:
        if path.exists():
            _retire(path, why="the log already holds the key registry")
        return None
    if not path.exists():
        return None
    entries = RegistryFile(path).read()  # corrupt: KeyFileError, the server does not start
    batch = changes((), entries)
    if batch:
        log_.append_batch(topic, batch)
    renamed = _retire(path, why=None)
    result = Imported(path, len(entries), len(batch), renamed)
    log.info(
        "key registry: imported %d entries (%d names) from %s into %s; the server reads the "
        "log from now on and never this file again%s",
        result.entries,
        result.names,
        path,
        topic,
        f" (renamed to {renamed})" if renamed else "",
    )
    return result


def _retire(path: Path, *, why: str | None) -> Path | None:
    target = imported_path(path)
    if why and target.exists():
        # The first import's copy is kept; this file is simply not read.
        log.warning("key registry: %s is not read (%s)", path, why)
        return None
    lock = RegistryFile(path).lock_path
    try:
        path.replace(target)
    except OSError as exc:
        log.warning(
            "key registry: %s is not read by the server%s, but could not be renamed to %s: %s",
            path,
            f" ({why})" if why else "",
            target,
            exc.strerror,
        )
        return None
    # The file's writers locked a sidecar; with the file retired, nothing locks it again.
    with contextlib.suppress(OSError):
        lock.unlink()
    if why:
        log.warning("key registry: %s is not read (%s); renamed to %s", path, why, target)
    return target


def refuse_imported(path: Path) -> None:
    """For the CLI's file mode: a registry file a server imported is not the registry."""
    done = imported_path(path)
    if done.exists():
        raise KeyFileError(
            f"{path} was imported into the ordered log by a server (it is now {done}); "
            "the servers read the log, not this file: manage keys through the server "
            "(a client config), or with --server-config SERVER_TOML on a host that can "
            "open its log"
        )
