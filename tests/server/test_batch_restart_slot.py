"""A batch node whose agent restarted while in flight frees its slot at once (its agent
killed the command, ``Job.node_lost(restarted=True)``), and a restored job (a server
restart or a takeover) must not take that slot again: ``Window.rebuild`` holds only the
crashed nodes that were lost without a restart (``batch.NODE_RESTARTED``).
"""

from __future__ import annotations

import json

from pushjobs.quorum import Share
from pushjobs.states import NodeState
from server.core.batch import BatchSpec
from server.core.coordinator import Coordinator
from server.core.effects import Send
from server.core.job import Job

T0 = 1_700_000_000_000
RUN_MS = 3_600_000


def test_a_restored_job_does_not_hold_the_slot_of_a_node_that_restarted() -> None:
    options = {"batch": BatchSpec(Share.parse("1", "batch")).to_options()}
    job = Job.new(
        "j1",
        "deploy",
        ["a", "b", "c"],
        T0,
        vote_timeout_ms=1000,
        run_timeout_ms=RUN_MS,
        options=options,
    )
    job.start(job.nodes, T0)
    for name in job.nodes:
        job.ack_commit(name, T0 + 1)
    job.node_lost("a", T0 + 2, "node restarted (new incarnation)", restarted=True)
    assert job.nodes["b"].state is NodeState.READY  # a's slot freed at once: b's turn
    restored = Job.restore(json.loads(json.dumps(job.snapshot())))
    coord = Coordinator()
    coord.restore(restored, 1)
    assert coord.view("j1")["batch"]["held"] == []
    out = restored.succeeded("b", T0 + 3)
    assert [e.node for e in out if isinstance(e, Send) and e.kind == "run"] == ["c"]
