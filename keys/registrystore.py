"""Where a key registry keeps its entries: the interface ``KeyRegistry`` works through.

Two stores implement it: ``keys.filestore.RegistryFile`` (one JSON file beside the server) and
``keys.topicstore.LogStore`` (the ordered log's compacted ``keys`` topic, which every server
of an installation shares). ``read`` returns the same tuple object until the entries
change, so callers may cache on its identity; ``edit`` yields the entries to change in
place and writes the change when the block ends, nothing if it raises.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from keys.entry import Entry


class RegistryStore(Protocol):
    @property
    def where(self) -> str:
        """Where the entries live, as error messages and outputs name it."""
        ...

    @property
    def path(self) -> Path | None:
        """The file, for a file store; None otherwise."""
        ...

    def read(self) -> tuple[Entry, ...]: ...

    def edit(self) -> AbstractContextManager[list[Entry]]: ...

    def writable(self) -> bool:
        """Whether ``edit`` may write now (a log store on a standby server may not)."""
        ...
