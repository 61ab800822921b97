"""A commit that can never reach its node (too large for the channel) is that node's no
vote, with the reason: the job ends now, not at its vote deadline."""

from __future__ import annotations

from pushjobs.quorum import Quorum
from pushjobs.states import NodeState
from server.core.coordinator import Coordinator
from server.shell.commands import TOO_LARGE

T0 = 1_700_000_000_000


def test_an_undeliverable_commit_is_the_nodes_no_vote_once() -> None:
    coordinator = Coordinator()
    coordinator.submit(
        "j1",
        "true",
        ["a", "b"],
        ["a", "b"],
        T0,
        quorum=Quorum.parse("100%"),
        vote_timeout_ms=30_000,
        run_timeout_ms=60_000,
        options={},
        requested_by="alice",
    )
    assert coordinator.undeliverable("j1", "a", T0 + 1, TOO_LARGE)
    job = coordinator.jobs["j1"]
    assert job.nodes["a"].state is NodeState.NACKED and job.nodes["a"].reason == TOO_LARGE
    assert not job.finished  # b's vote is still to come
    coordinator.undeliverable("j1", "b", T0 + 1, TOO_LARGE)
    assert job.finished and job.state.value == "quorum_failed"
    assert coordinator.undeliverable("j1", "a", T0 + 2, TOO_LARGE) == []
    assert coordinator.undeliverable("gone", "a", T0 + 2, TOO_LARGE) == []
