"""Output capture that keeps the tail: the last ``limit`` bytes, and whether any were cut.

The end of a failing command's output is what explains it, so on overflow the head goes.
Memory stays bounded whatever the command writes.
"""

from __future__ import annotations


class TailBuffer:
    __slots__ = ("_data", "limit", "total")

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must not be negative")
        self.limit = limit
        self.total = 0
        self._data = bytearray()

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.limit == 0:
            return
        if len(chunk) >= self.limit:
            self._data[:] = chunk[-self.limit :]
            return
        self._data += chunk
        excess = len(self._data) - self.limit
        if excess > 0:
            del self._data[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._data)

    def text(self) -> str:
        """The kept tail as text; a multi-byte character cut at the edge becomes U+FFFD."""
        return self._data.decode("utf-8", errors="replace")
