"""How many nodes must be ready before a job runs (parsed by the CLI, kept by the server)."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
            if count < 0:
                raise ValueError
            return cls(count=count)
        except ValueError:
            problem = f"quorum must be a count (3) or a percent (75%), not {text!r}"
            raise ValueError(problem) from None

    def required(self, targets: int) -> int:
        if self.count is not None:
            return min(self.count, targets)
        percent = 100.0 if self.percent is None else self.percent
        return math.ceil(targets * percent / 100 - 1e-9)

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent or 100:g}%"
