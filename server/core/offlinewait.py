"""Deferred delivery to offline nodes (``job start --offline-wait``): ``Late``, owned by
the job. Pure.

Theory of operation. Without it a target offline at start is ``unavailable`` at once,
and the operator must remember to run the job again once the laptop wakes or the server
is back from its reboot. A job given ``offline_wait_ms`` keeps itself open for them
instead, until ``offline_until_ms`` (the vote's start plus the wait: for a job held for
approval, its approval's time):

- *Who waits.* The targets offline at start: known nodes not online, a node whose key
  is registered but that was never heard included (a laptop not yet enrolled); a name
  nobody knows is no target (the selection refuses it). A target a new leader had not
  heard yet when the takeover grace ended (``awaiting.py``) waits too, rather than being
  ``unavailable``. Each is ``offline`` (a node state of its own, not terminal), its row
  saying until when: ``job status`` lists them apart from the nodes asked to vote, and
  the state alone tells a node never asked (``offline``) from one asked and silent
  (``new``), which is what exactly-once rests on.
- *Coming online.* A node heard before the deadline moves ``offline`` -> ``new`` and gets
  its commit (``Job.admit``, from ``Coordinator.admit`` as the node comes online): the
  move is an effect before the ``commit``, so it is durable before the command leaves.
  While the job votes it votes with the others; once it runs, it votes alone
  (``late``): its ack makes it ``ready`` and it is told to run at once (a batch job: it
  joins the back of the window's queue, ``waiting``), its nack ends it ``nacked``. A
  late node asked and silent for ``vote_timeout_ms`` is ``unavailable`` ("no vote
  before the deadline").
- *In turn.* Several jobs waiting for one node ask it one at a time, the first started
  first, each once the node is let go by the one before (``Coordinator.admit``): a node
  runs one job at a time, and would refuse the others ``busy``.
- *Quorum.* Judged once, when the vote ends, over the nodes that voted or could have:
  the targets not ``offline`` then. So ``--quorum 80%`` of 10 nodes of which 5 are
  offline needs 4 of the 5 online ones. A job whose every target is offline has nobody
  to judge: its quorum is met vacuously and it runs each node as it comes. A late node
  never changes the verdict; a job that failed its quorum waits for nobody (its
  ``offline`` nodes become ``unavailable``, "the job failed its quorum").
- *Batches.* The window, its wait and the failure budget keep their meaning over the
  whole job; a late node queues behind the nodes waiting already. Once the budget is
  spent the job starts no node any more: the nodes still ``offline`` are ``skipped``
  with the waiting ones, and the job ends ``halted`` without waiting for the deadline.
- *Revoked.* A node whose key is revoked while it waits cannot come back: it is
  ``unavailable`` at once, with the revocation's reason (``Coordinator.gone``).
- *The deadline.* At ``offline_until_ms`` the nodes still ``offline`` become
  ``unavailable`` ("offline until the offline-wait deadline"). The job does not end
  while one waits (``offline`` is not terminal), so a job whose online nodes all
  finished stays ``running`` until the deadline. A running job's run deadline
  (``run_deadline_ms``) is the later of its own and the last a late node could need:
  ``offline_until_ms + vote_timeout_ms + run_timeout_ms`` (the agent bounds each run by
  the run timeout from its commit anyway).
- *Exactly once.* A node gets its commit once: only the move out of ``offline`` sends
  it, and a repeat of a commit (a lost one, after a failover) is answered by the agent
  from its journal, never run twice. A node that restarts or goes offline while
  ``offline`` was never asked: it just goes on waiting. One that restarts after its
  commit is handled as any other (``crashed``), never asked again.
- *Failover.* ``offline_until_ms`` is in the job's header and the ``offline`` rows in
  its node table: a new leader waits for the same nodes until the same instant (a
  takeover's ``rearm`` never moves it: the operator asked for that instant). A late
  node's vote deadline is rebuilt from its row (``changed_ms``: when it was asked), and a
  takeover's grace moves it as it moves a vote deadline.

``Late`` keeps what the job needs between inputs: the late voters' own vote deadlines
(so a tick is O(late voters), not O(targets)); the deadline is the job's field. The job
makes every node move itself (``job.py``).

Killed at any line: nothing here is durable; ``Late.rebuild`` reads it back from the
node table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pushjobs.states import NodeState

WAITING = "offline at start: waiting for it until the offline-wait deadline"
GAVE_UP = "offline until the offline-wait deadline"
NO_QUORUM = "offline at start; the job failed its quorum"


def run_deadline_ms(
    now_ms: int, run_timeout_ms: int, vote_timeout_ms: int, offline_until_ms: int | None
) -> int:
    """A running job's deadline: its own, or the last a late node could need."""
    own = now_ms + run_timeout_ms
    if offline_until_ms is None:
        return own
    return max(own, offline_until_ms + vote_timeout_ms + run_timeout_ms)


@dataclass(slots=True)
class Late:
    """A job's late voters: nodes asked to commit once the job ran, each until when."""

    voters: dict[str, int] = field(default_factory=dict)  # node -> its vote deadline

    def rebuild(self, rows: Iterable[tuple[str, NodeState, int]], vote_timeout_ms: int) -> None:
        """From (name, state, changed_ms) of a restored running job: its ``new`` nodes are
        late voters, asked at ``changed_ms``."""
        self.voters = {
            name: changed_ms + vote_timeout_ms
            for name, state, changed_ms in rows
            if state is NodeState.NEW
        }

    def asked(self, name: str, now_ms: int, vote_timeout_ms: int) -> None:
        """``name`` was sent its commit while the job runs: it votes alone, until then."""
        self.voters[name] = now_ms + vote_timeout_ms

    def floor(self, earliest_ms: int) -> None:
        """A takeover: no late voter's deadline falls before ``earliest_ms`` (its answer
        may be on its way to the new leader)."""
        for name, until in self.voters.items():
            if until < earliest_ms:
                self.voters[name] = earliest_ms

    def voted(self, name: str) -> None:
        """``name`` answered, or was lost: no longer waited for."""
        self.voters.pop(name, None)

    def silent(self, now_ms: int) -> list[str]:
        """Late voters whose vote deadline passed, no longer tracked."""
        due = [name for name, until in self.voters.items() if until <= now_ms]
        for name in due:
            del self.voters[name]
        return due

    def deadline_ms(self, until_ms: int | None) -> int | None:
        """The next instant the wait needs a tick: ``until_ms`` (the offline-wait
        deadline, while nodes are ``offline``) or the first late voter's deadline."""
        dues = list(self.voters.values())
        if until_ms is not None:
            dues.append(until_ms)
        return min(dues, default=None)
