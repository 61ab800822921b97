"""The takeover half of ``Job``: targets a new leader has not heard from yet. Pure.

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

``Job`` takes this as a base, as it takes ``RollingBatch``. Killed at any line: nothing
here is durable; a job restored by the next leader holds these nodes ``new`` while it
votes, and that leader's own takeover grace waits for them (``takeover.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pushjobs.states import JobState, NodeState
from server.core.effects import Effect
from server.core.nodemoves import MovesNodes
from server.core.transitions import NodeEvent

UNHEARD = "not heard from since the server took over"


@dataclass(slots=True)
class Unheard:
    """A job's targets not heard yet, and until when they are waited for."""

    names: set[str] = field(default_factory=set)
    until_ms: int | None = None


class AwaitingNodes(MovesNodes):
    """Owns the unheard targets and their deadline; moves nodes only through ``_node``."""

    __slots__ = ()

    state: JobState
    vote_deadline_ms: int | None
    _unheard: Unheard

    def _await(self, unheard: Iterable[str], until_ms: int | None, vote_deadline_ms: int) -> int:
        """Wait for ``unheard`` targets until ``until_ms`` (as voting starts); the vote
        deadline, moved to the grace's end if it fell before."""
        names = {name for name in unheard if name in self.nodes}
        if not names or until_ms is None:
            return vote_deadline_ms
        self._unheard.names = names
        self._unheard.until_ms = until_ms
        return max(vote_deadline_ms, until_ms)

    def awaits(self, node: str) -> bool:
        """Whether ``node`` is a target this job still waits to hear from."""
        return node in self._unheard.names

    def heard(self, node: str) -> None:
        """``node`` came online: from now on it is a voter like any other."""
        self._unheard.names.discard(node)

    def _unawait(self, node: str) -> bool:
        """Stop waiting for ``node`` (it was lost); whether it was still awaited."""
        if node not in self._unheard.names:
            return False
        self._unheard.names.discard(node)
        return True

    def _voting_deadline_ms(self) -> int | None:
        """The vote deadline, or the grace's end while targets are unheard (``_await``
        never lets the vote deadline fall before it)."""
        if self._unheard.names and self._unheard.until_ms is not None:
            return self._unheard.until_ms
        return self.vote_deadline_ms

    def _hear_no_more(self, now_ms: int, out: list[Effect]) -> None:
        """At the grace's end: the targets still unheard are unavailable."""
        unheard = self._unheard
        if unheard.until_ms is None or now_ms < unheard.until_ms:
            return
        for name in [n for n in self.nodes if n in unheard.names]:
            if self.nodes[name].state is NodeState.NEW:
                self._node(name, NodeEvent.UNHEARD, now_ms, out, reason=UNHEARD)
        unheard.names.clear()
        unheard.until_ms = None
