"""The finished jobs a coordinator keeps in memory, and which to forget. Pure.

Finished jobs are kept for ``job list`` and ``job status`` (all stay in the log), oldest
forgotten first once any bound is passed: their number, their node rows (a finished
50,000-node job holds ~16 MB, so 10,000 of them would not fit), the bytes of their
options (one with a 64 KB env holds 64 KB) and of the output captured from their nodes
(up to the agents' capture limit per node and channel). The newest is always kept,
whatever its size.
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
    def __init__(
        self, keep: int, keep_nodes: int, keep_option_bytes: int, keep_output_bytes: int
    ) -> None:
        self.keep = keep
        self.bounds = (keep_nodes, keep_option_bytes, keep_output_bytes)
        # job id -> (its node rows, option bytes, output bytes), oldest first
        self._sizes: dict[str, tuple[int, int, int]] = {}
        self._totals = [0, 0, 0]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._sizes

    def add(self, job_id: str, nodes: int, option_bytes: int, output_bytes: int) -> list[str]:
        """File a job that just finished; the ids of those to forget now, oldest first."""
        sizes = (nodes, option_bytes, output_bytes)
        self._sizes[job_id] = sizes
        self._totals = [total + size for total, size in zip(self._totals, sizes, strict=True)]
        forget: list[str] = []
        while len(self._sizes) > 1 and (
            len(self._sizes) > self.keep
            or any(total > bound for total, bound in zip(self._totals, self.bounds, strict=True))
        ):
            old = next(iter(self._sizes))
            gone = self._sizes.pop(old)
            self._totals = [total - size for total, size in zip(self._totals, gone, strict=True)]
            forget.append(old)
        return forget
