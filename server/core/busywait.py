"""Waiting for busy nodes: who waits for what, in line, up to a bound. Pure.

Theory of operation. A node runs one job at a time and refuses another ``busy``. A job
that may wait (``job start --busy-wait``: ``Job.busy_wait_ms``) and a schedule's fire
(``scheduler.py``) do not ask a busy node to commit: they wait until every online node they
target is free, then start as they would have, or, at their bound, go ahead without the
nodes still busy. Two callers, one rule, decided here:

- a node is busy while an active job holds it (``holder``: the coordinator's view, the
  jobs it runs or votes on; a waiter itself holds nothing);
- waiters are looked at in line (the order they began to wait: creation for jobs, due
  time for fires) and each *claims* its nodes for the pass, so a waiter never overtakes
  one before it on a node they share, and two that share a node never both start at once
  to refuse each other. A waiter holds no node while it waits (no commit is sent), so two
  waiters can never hold what the other waits for (no deadlock);
- a waiter past its bound goes ahead: the nodes still busy are said so (``gave_up``).

``Claims`` is one pass over the line, rebuilt each time something may have freed a node:
a job ended on a node, a tick. Time comes from the caller (wall ms).

Killed at any line: nothing here is durable; the callers keep who waits (a waiting job's
own header, a fire not started yet in its schedule's partition).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

# A schedule's fire waits this long by default (``schedule add --busy-wait`` sets it):
# a bound, so a node held by a long job delays a fire, never holds it for good.
DEFAULT_FIRE_WAIT_MS = 300_000


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why a waiter cannot go yet on ``node``: ``holder`` holds it, or (``queued``) an
    earlier waiter claimed it in this pass."""

    node: str
    holder: str
    queued: bool = False

    def why(self) -> str:
        """``n1 busy with job X`` (the scheduler's history line)."""
        return f"{self.node} busy with job {self.holder}" + (" (due before)" if self.queued else "")

    def reason(self) -> str:
        """A waiting node's row: ``waiting: busy with job X``."""
        if self.queued:
            return f"waiting: job {self.holder}, waiting before this one, needs it first"
        return f"waiting: busy with job {self.holder}"


class Claims:
    """One pass over the waiters, in line: which nodes each finds busy."""

    def __init__(self, holder: Callable[[str], str | None]) -> None:
        self._holder = holder  # node -> a job holding it (no waiter), or None
        # node -> the waiter before in this pass, and whether it went ahead (holds it now)
        self._claimed: dict[str, tuple[str, bool]] = {}

    def blocked(self, nodes: Iterable[str]) -> dict[str, Blocked]:
        """The nodes of ``nodes`` a waiter cannot have now, each with why."""
        out: dict[str, Blocked] = {}
        for node in nodes:
            earlier = self._claimed.get(node)
            if earlier is not None:
                out[node] = Blocked(node, earlier[0], queued=not earlier[1])
                continue
            holder = self._holder(node)
            if holder is not None:
                out[node] = Blocked(node, holder)
        return out

    def claim(self, waiter: str, nodes: Iterable[str], *, went: bool = False) -> None:
        """``waiter`` is in line for ``nodes`` (``went``: it goes ahead now, so holds
        them): no waiter after it has them this pass (one before it keeps its claim)."""
        for node in nodes:
            self._claimed.setdefault(node, (waiter, went))


def seconds(ms: int) -> str:
    """``0.4``, ``12``, ``300``: a wait for people."""
    return f"{ms / 1000:.1f}".removesuffix(".0")


def gave_up(blocked: Blocked, waited_ms: int) -> str:
    """The row of a node still busy when its waiter's bound passed."""
    return f"still busy with job {blocked.holder} after waiting {seconds(waited_ms)} s (busy wait)"
