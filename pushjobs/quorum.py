"""Shares of a job's targets, parsed by the CLI and kept by the server: the quorum (how
many nodes must be ready before a job runs) and, for rolling batches, the window and the
failure budget (``Share``: how many run at once, how many may fail)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# No fleet is larger; a count beyond it could not even be written back in a reply (JSON
# integers are 64-bit on the wire).
MAX_COUNT = 1_000_000


@dataclass(frozen=True, slots=True)
class Quorum:
    """A count, or a percent of the targets."""

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> Quorum:
        """'3' or '75%'; ValueError with a readable message otherwise."""
        text = text.strip()
        try:
            if text.endswith("%"):
                percent = float(text[:-1])
                if not 0 <= percent <= 100:
                    raise ValueError
                return cls(percent=percent)
            count = int(text)
            if not 0 <= count <= MAX_COUNT:
                raise ValueError
            return cls(count=count)
        except ValueError:
            problem = (
                f"quorum must be a count (3, at most {MAX_COUNT:,}) or a percent (75%), "
                f"not {text!r}"
            )
            raise ValueError(problem) from None

    def required(self, targets: int) -> int:
        if self.count is not None:
            return min(self.count, targets)
        percent = 100.0 if self.percent is None else self.percent
        return math.ceil(targets * percent / 100 - 1e-9)

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent or 100:g}%"


@dataclass(frozen=True, slots=True)
class Share:
    """A count of nodes (at least 1) or a percent of the targets (more than 0)."""

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str, what: str) -> Share:
        """'3' or '25%'; ValueError naming ``what`` otherwise."""
        text = str(text).strip()
        try:
            if text.endswith("%"):
                percent = float(text[:-1])
                if not 0 < percent <= 100:  # NaN fails this too
                    raise ValueError
                return cls(percent=percent)
            count = int(text)
            if not 1 <= count <= MAX_COUNT:
                raise ValueError
            return cls(count=count)
        except ValueError:
            problem = (
                f"{what} must be a count (3, at most {MAX_COUNT:,}) or a percent (25%), "
                f"not {text!r}"
            )
            raise ValueError(problem) from None

    def of(self, targets: int, *, round_up: bool) -> int:
        """The count, or the percent of ``targets`` rounded as asked; at least 1."""
        if self.count is not None:
            return self.count
        exact = targets * (self.percent or 100.0) / 100
        # The epsilon keeps 30% of 10 at 3 whichever way binary floats round it.
        return max(1, math.ceil(exact - 1e-9) if round_up else math.floor(exact + 1e-9))

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"
