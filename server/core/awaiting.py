"""Targets a new leader has not heard from yet: ``Unheard``, owned by the job. Pure.

Theory of operation. Right after a takeover the fleet is still moving to the new leader:
its nodes are alive, but this server has not heard them yet. A job started then must not
take that for their absence (``unavailable``, and ``quorum_failed`` for the job). So
``start`` is given the targets still *unheard* and the end of the takeover's grace; until
then they are waited for as a vote waits for its nodes (they stay ``new``, and the vote
deadline falls no earlier than the grace's end):

- a node heard in time (``heard``: it came online) is sent its commit by the coordinator
  (``Coordinator.node_online``) and votes like any other;
- a node lost meanwhile (revoked, restarted, given up by node intake) was never asked to
  commit: it is ``unavailable``, not ``crashed``;
- at the grace's end (``tick``) the targets still unheard and ``new`` become
  ``unavailable`` ("not heard from since the server took over"), and the vote goes on
  with the rest.

Each ``Job`` (``job.py``) owns one ``Unheard``: it keeps who is waited for and until when,
and answers the job's questions about them; the job makes every node move itself.

Killed at any line: nothing here is durable; a job restored by the next leader holds these
nodes ``new`` while it votes, and that leader's own takeover grace waits for them
(``takeover.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

UNHEARD = "not heard from since the server took over"


@dataclass(slots=True)
class Unheard:
    """A job's targets not heard yet, and until when they are waited for."""

    names: set[str] = field(default_factory=set)
    until_ms: int | None = None

    def wait(self, names: set[str], until_ms: int | None, vote_deadline_ms: int) -> int:
        """Wait for ``names`` until ``until_ms`` (as voting starts); the vote deadline,
        moved to the grace's end if it fell before."""
        if not names or until_ms is None:
            return vote_deadline_ms
        self.names = names
        self.until_ms = until_ms
        return max(vote_deadline_ms, until_ms)

    def awaits(self, node: str) -> bool:
        """Whether ``node`` is still waited for."""
        return node in self.names

    def heard(self, node: str) -> None:
        """``node`` came online: from now on it is a voter like any other."""
        self.names.discard(node)

    def lost(self, node: str) -> bool:
        """``node`` was lost: stop waiting for it; whether it was still waited for."""
        if node not in self.names:
            return False
        self.names.discard(node)
        return True

    def deadline_ms(self, vote_deadline_ms: int | None) -> int | None:
        """The grace's end while targets are unheard, else the vote deadline (``wait``
        never lets the vote deadline fall before the grace's end)."""
        if self.names and self.until_ms is not None:
            return self.until_ms
        return vote_deadline_ms

    def over(self, now_ms: int) -> set[str]:
        """At the grace's end: the targets still unheard, no longer waited for; before it,
        none."""
        if self.until_ms is None or now_ms < self.until_ms:
            return set()
        names = self.names
        self.names = set()
        self.until_ms = None
        return names
