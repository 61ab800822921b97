"""The finished jobs a coordinator keeps in memory, and which to forget. Pure.

Finished jobs are kept for ``job list`` and ``job status`` (all stay in the log), oldest
forgotten first once any bound is passed: their number, their node rows (a finished
50,000-node job holds ~16 MB, so 10,000 of them would not fit) and the bytes of their
options (one with a 64 KB env holds 64 KB). The newest is always kept, whatever its size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


def option_bytes(options: Mapping[str, Any]) -> int:
    """What a job's options hold, as encoded (at most one frame's worth)."""
    try:
        return len(orjson.dumps(options))
    except (TypeError, ValueError, OverflowError):  # only a bug: never stop the loop
        return len(repr(options))


class Finished:
    def __init__(self, keep: int, keep_nodes: int, keep_option_bytes: int) -> None:
        self.keep, self.keep_nodes, self.keep_option_bytes = keep, keep_nodes, keep_option_bytes
        self._sizes: dict[
            str, tuple[int, int]
        ] = {}  # job id -> (nodes, option bytes), oldest first
        self._nodes = self._option_bytes = 0

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._sizes

    def add(self, job_id: str, nodes: int, option_bytes: int) -> list[str]:
        """File a job that just finished; the ids of those to forget now, oldest first."""
        self._sizes[job_id] = (nodes, option_bytes)
        self._nodes += nodes
        self._option_bytes += option_bytes
        forget: list[str] = []
        while len(self._sizes) > 1 and (
            len(self._sizes) > self.keep
            or self._nodes > self.keep_nodes
            or self._option_bytes > self.keep_option_bytes
        ):
            old = next(iter(self._sizes))
            nodes_gone, bytes_gone = self._sizes.pop(old)
            self._nodes -= nodes_gone
            self._option_bytes -= bytes_gone
            forget.append(old)
        return forget
