"""What a node's heartbeat says it is doing, judged against the coordinator's jobs. Pure.

The ``Coordinator``'s base (``coordinator.py``): from a heartbeat's ``busy_with`` (the job
the agent holds or runs) and ``busy_state`` (``committed`` or ``running``), the commands
the node should have had and did not (``unreported``), and a job it still holds that is
over for it (``stale_hold``). Both only read the jobs; the caller sends and rate-limits.
"""

from __future__ import annotations

from pushjobs.states import TERMINAL_NODE_STATES, NodeState
from server.core.effects import Send
from server.core.job import Job


class JudgesHeartbeats:
    """Reads the coordinator's jobs and its index of the jobs each node is active in."""

    jobs: dict[str, Job]
    _active_by_node: dict[str, set[str]]

    def unreported(
        self, node: str, busy_with: str | None, busy_state: str | None = None
    ) -> list[Send]:
        """Commands to send again, judged from what a node's heartbeat says it is doing.

        - ``commit`` while the job votes and the node's vote is not recorded: the commit
          was lost (a full queue, a blip), or the node's ack was (sent to a server that
          died, or while no server led). A node that holds the job re-acks it; one busy
          with another job nacks ``busy``: either way the vote is counted.
        - ``run`` for a running job the node should run but says it is not busy with: a
          node that finished it (its result sent while no leader listened) answers with
          its stored outcome; one that never had the job answers ``nack_run``.
        - ``run`` when the node says it is still only ``committed`` to a running job in
          which it is ready: the run was lost.

        The caller rate-limits; a repeat is always safe (the agent never runs twice).
        """
        out: list[Send] = []
        for job_id in self._active_by_node.get(node, ()):
            job = self.jobs[job_id]
            state = job.nodes[node].state
            if job.state.value == "voting":
                if state is NodeState.NEW:
                    out.append(Send("commit", job_id, node))
            elif job.state.value == "running":
                lost_result = job_id != busy_with and state in (NodeState.READY, NodeState.RUNNING)
                lost_run = (
                    job_id == busy_with and busy_state == "committed" and state is NodeState.READY
                )
                if lost_result or lost_run:
                    out.append(Send("run", job_id, node))
        return out

    def stale_hold(self, node: str, busy_with: str | None, busy_state: str | None) -> Send | None:
        """An ``abort`` for a job a node holds or runs that is over for it; else None.

        A node that acted on a commit late (it was paused through the vote, or its vote
        came after the job ended) would otherwise stay committed until its own commit
        timeout, refusing every other job as ``busy``; one that was paused or cut off while
        it ran is reported ``crashed`` while its command runs on. The job has ended, or
        ended for this node (crashed, unavailable, quorum lost, timed out), or is not known
        at all (only a job retired long after it ended is): the node is told to let go.
        """
        if busy_with is None or busy_state not in ("committed", "running"):
            return None
        job = self.jobs.get(busy_with)
        if job is not None and not job.finished:
            record = job.nodes.get(node)
            if record is not None and record.state not in TERMINAL_NODE_STATES:
                return None
        return Send("abort", busy_with, node)
