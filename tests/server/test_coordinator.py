"""The coordinator: routing replies and node events to jobs, late replies, resends."""

from __future__ import annotations

from typing import Any

import pytest

from pushjobs.errors import StateError
from pushjobs.protocol.messages import (
    AckCommit,
    AckRun,
    Failed,
    JobOutput,
    NackCommit,
    Started,
    Succeeded,
)
from pushjobs.quorum import Quorum
from server.core.coordinator import Coordinator, JobCreated, OutputReceived, changed_jobs
from server.core.effects import JobChanged, NodeChanged, Send

T0 = 1_700_000_000_000


def env(seq: int = 1, sender: str = "n1") -> dict[str, Any]:
    return {"sender": sender, "incarnation": "i", "sequence": seq, "timestamp": T0}


def submit(coord: Coordinator, job_id: str = "j1", targets=("n1", "n2"), online=("n1", "n2")):
    return coord.submit(
        job_id,
        "true",
        targets,
        online,
        T0,
        quorum=Quorum(),
        vote_timeout_ms=1000,
        run_timeout_ms=5000,
        options={},
        requested_by="alice",
    )


def test_submit_creates_then_starts_and_sends_commits() -> None:
    coord = Coordinator()
    out = submit(coord)
    assert isinstance(out[0], JobCreated)
    assert [s.node for s in out if isinstance(s, Send) and s.kind == "commit"] == ["n1", "n2"]
    assert coord.versions["j1"] == 1
    assert coord.jobs["j1"].state.value == "voting"


def test_duplicate_job_id_is_refused() -> None:
    coord = Coordinator()
    submit(coord)
    with pytest.raises(StateError):
        submit(coord)


def test_full_run_to_complete_with_output() -> None:
    coord = Coordinator()
    submit(coord)
    coord.reply(AckCommit(job_id="j1", **env(1, "n1")), T0 + 1)
    out = coord.reply(AckCommit(job_id="j1", **env(1, "n2")), T0 + 2)
    assert {s.node for s in out if isinstance(s, Send) and s.kind == "run"} == {"n1", "n2"}
    coord.reply(AckRun(job_id="j1", **env(2, "n1")), T0 + 3)
    assert coord.reply(Started(job_id="j1", pid=5, **env(3, "n1")), T0 + 3) == []
    output = JobOutput(stdout="hi\n")
    out = coord.reply(
        Succeeded(job_id="j1", exit_status=0, duration_ms=1, output=output, **env(4, "n1")), T0 + 4
    )
    assert any(isinstance(c, OutputReceived) and c.output.stdout == "hi\n" for c in out)
    out = coord.reply(
        Failed(job_id="j1", exit_status=2, reason="exit status 2", duration_ms=1, **env(2, "n2")),
        T0 + 5,
    )
    assert JobChanged("j1", out[-1].prev, out[-1].state, T0 + 5) == out[-1]  # type: ignore[union-attr]
    assert coord.jobs["j1"].state.value == "complete"
    assert coord.outputs[("j1", "n1")].output.stdout == "hi\n"
    assert not coord.targets_pending("n1") and not coord.targets_pending("n2")


def test_late_and_unknown_replies_are_counted_and_change_nothing() -> None:
    coord = Coordinator()
    submit(coord)
    version = coord.versions["j1"]
    assert coord.reply(AckRun(job_id="j1", **env()), T0) == []  # not running yet
    assert coord.reply(AckCommit(job_id="nope", **env()), T0) == []
    assert coord.late == {"ack_run": 1, "unknown_job": 1}
    assert coord.versions["j1"] == version


def test_node_lost_crashes_it_in_every_active_job() -> None:
    coord = Coordinator()
    submit(coord, "j1")
    submit(coord, "j2", targets=("n1",), online=("n1",))
    out = coord.node_lost("n1", T0 + 1, "node went offline")
    crashed = [c for c in out if isinstance(c, NodeChanged) and c.state.value == "crashed"]
    assert {c.job_id for c in crashed} == {"j1", "j2"}
    assert coord.node_lost("n1", T0 + 2, "again") == []


def test_node_online_resends_commit_while_voting_and_run_while_ready() -> None:
    coord = Coordinator()
    submit(coord, targets=("n1", "n2"), online=("n1", "n2"))
    assert coord.node_online("n1") == [Send("commit", "j1", "n1")]
    coord.reply(AckCommit(job_id="j1", **env(1, "n1")), T0)
    assert coord.node_online("n1") == []  # voted: nothing to repeat while voting
    coord.reply(AckCommit(job_id="j1", **env(1, "n2")), T0)
    assert coord.node_online("n1") == [Send("run", "j1", "n1")]
    coord.reply(AckRun(job_id="j1", **env(2, "n1")), T0)
    assert coord.node_online("n1") == []  # running: its result will come


def test_tick_applies_the_vote_deadline() -> None:
    coord = Coordinator()
    submit(coord)
    coord.reply(NackCommit(job_id="j1", reason="busy", **env(1, "n1")), T0)
    assert coord.next_deadline_ms() == T0 + 1000
    assert coord.tick(T0 + 999) == []
    out = coord.tick(T0 + 1000)
    assert coord.jobs["j1"].state.value == "quorum_failed"
    assert changed_jobs(out) == ["j1"]
    assert coord.next_deadline_ms() is None


def test_finished_jobs_beyond_the_limit_are_forgotten() -> None:
    coord = Coordinator(keep_finished=2)
    for i in range(4):
        submit(coord, f"j{i}", targets=("n1",), online=())
    assert sorted(coord.jobs) == ["j2", "j3"]


def test_restore_indexes_active_nodes() -> None:
    first = Coordinator()
    submit(first)
    job = first.jobs["j1"]
    second = Coordinator()
    second.restore(job, 7)
    assert second.versions["j1"] == 7
    assert second.node_online("n2") == [Send("commit", "j1", "n2")]


def test_unreported_asks_again_for_running_jobs_the_node_says_it_is_not_busy_with() -> None:
    coord = Coordinator()
    submit(coord, targets=("n1", "n2"), online=("n1", "n2"))
    # It holds the job but its vote is not recorded: its ack was lost (the ack leaves on
    # the same socket before the heartbeat that shows the commit). It re-acks.
    assert coord.unreported("n1", "j1", "committed") == [Send("commit", "j1", "n1")]
    assert coord.unreported("n1", "j9", "committed") == [Send("commit", "j1", "n1")]  # busy
    assert coord.unreported("n1", None) == [Send("commit", "j1", "n1")]  # commit lost
    coord.reply(AckCommit(job_id="j1", **env(1, "n1")), T0)
    assert coord.unreported("n1", None) == []  # voted: the commit arrived
    coord.reply(AckCommit(job_id="j1", **env(1, "n2")), T0)
    assert coord.jobs["j1"].state.value == "running"
    assert coord.unreported("n1", "j1", "committed") == [Send("run", "j1", "n1")]  # run lost
    assert coord.unreported("n1", "j1", "running") == []
    assert coord.unreported("n1", "j1") == []  # busy with it: its result will come
    assert coord.unreported("n1", None) == [Send("run", "j1", "n1")]
    coord.reply(Succeeded(job_id="j1", exit_status=0, duration_ms=1, **env(2, "n1")), T0)
    assert coord.unreported("n1", None) == []


def test_active_jobs_are_tracked_without_scanning_finished_ones() -> None:
    coord = Coordinator(keep_finished=5)
    submit(coord, "j1", targets=("n1",), online=())  # nobody online: quorum fails at once
    submit(coord, "j2")
    submit(coord, "j3")
    assert coord.jobs["j1"].finished
    assert [job.job_id for job in coord.active()] == ["j2", "j3"]
    coord.abort("j2", T0 + 1, "test")
    assert [job.job_id for job in coord.active()] == ["j3"]
    assert coord.next_deadline_ms() == coord.jobs["j3"].vote_deadline_ms


def test_finished_jobs_are_also_bounded_by_their_node_rows() -> None:
    coord = Coordinator(keep_finished=100, keep_finished_nodes=5)
    submit(coord, "small", targets=("n1", "n2"), online=())
    submit(coord, "mid", targets=("n1", "n2", "n3"), online=())
    assert sorted(coord.jobs) == ["mid", "small"]  # 5 rows: within the budget
    submit(coord, "big", targets=tuple(f"n{i}" for i in range(9)), online=())
    # Alone over the budget, the newest finished job is still kept; the older ones go.
    assert sorted(coord.jobs) == ["big"]
    submit(coord, "next", targets=("n1",), online=())
    assert sorted(coord.jobs) == ["next"]


def test_a_job_held_or_run_by_a_node_it_is_over_for_is_aborted() -> None:
    coord = Coordinator()
    submit(coord, targets=("n1", "n2"), online=("n1", "n2"))
    assert coord.stale_hold("n1", "j1", "committed") is None  # still voting: wanted
    assert coord.stale_hold("n1", None, None) is None
    coord.node_lost("n1", T0 + 1, "node went offline")  # paused through the vote
    # It wakes, acts on the queued commit and holds it: its job crashed it, so let go.
    assert coord.stale_hold("n1", "j1", "committed") == Send("abort", "j1", "n1")
    assert coord.stale_hold("n2", "j1", "committed") is None  # n2 is still in the vote
    assert coord.stale_hold("n1", "j1", "running") == Send("abort", "j1", "n1")  # runs on
    assert coord.stale_hold("n2", "j1", "running") is None  # n2 is not done with it
    coord.abort("j1", T0 + 2, "test")
    assert coord.stale_hold("n2", "j1", "committed") == Send("abort", "j1", "n2")
    assert coord.stale_hold("n1", "unknown", "committed") == Send("abort", "unknown", "n1")


def test_holding_lists_the_active_jobs_a_node_has_not_finished() -> None:
    coord = Coordinator()
    submit(coord, "j1", targets=("n1", "n2"), online=("n1", "n2"))
    submit(coord, "j2", targets=("n1",), online=("n1",))
    assert sorted(coord.holding("n1")) == ["j1", "j2"]
    coord.node_lost("n1", T0 + 1, "gone")
    assert coord.holding("n1") == [] and coord.holding("n2") == ["j1"]


def test_what_an_agent_could_not_kill_reaches_the_row_even_after_the_server_ended_it() -> None:
    """Issue 27: the server marks a node aborted as it sends the abort; the agent's report,
    later, still puts the processes it could not kill in the node's row (and its chunk)."""
    from pushjobs.protocol.messages import Aborted
    from server.core.coordinator import NodeAmended
    from server.core.records import touched_chunks
    from server.core.snapshot import node_from_json, node_json

    coord = Coordinator()
    submit(coord, targets=("n1",), online=("n1",))
    coord.reply(AckCommit(**env(1), job_id="j1"), T0 + 1)
    coord.reply(AckRun(**env(2), job_id="j1"), T0 + 2)
    coord.jobs["j1"].abort(T0 + 3)
    left = ("pid 7 (sleep, uid 0): permission denied",)
    out = coord.reply(
        Aborted(**env(3), job_id="j1", reason="abort requested", duration_ms=5, left_running=left),
        T0 + 4,
    )
    assert out == [NodeAmended("j1", "n1")]
    record = coord.jobs["j1"].nodes["n1"]
    assert record.state.value == "aborted" and record.left_running == left
    assert touched_chunks(out, coord.jobs) == {"j1": {0}}
    assert node_from_json(node_json(record)).left_running == left
    # The same report again changes nothing; a row without any keeps its old form.
    assert (
        coord.reply(
            Aborted(**env(4), job_id="j1", reason="r", duration_ms=5, left_running=left), T0 + 5
        )
        == []
    )
    assert "left_running" not in node_json(coord.jobs["j1"].nodes["n1"].__class__())


def nack(job_id: str, reason: str, seq: int, sender: str = "n1") -> NackCommit:
    return NackCommit(**env(seq, sender), job_id=job_id, reason=reason)


def test_a_busy_nack_naming_a_job_over_for_the_node_is_answered_not_counted() -> None:
    """``job abort`` then ``job start`` at once, or an abort lost with an edge: the node
    still holds the aborted job. It is told to let it go, and asked again."""
    coord = Coordinator()
    submit(coord, "old")
    coord.abort("old", T0 + 1, "aborted by alice")
    assert coord.jobs["old"].finished
    submit(coord, "new")
    for tries in range(2):
        out = coord.reply(nack("new", "busy with job old", seq=10 + tries), T0 + 2)
        assert out == [Send("abort", "old", "n1")]
        assert coord.jobs["new"].nodes["n1"].state.value == "new"  # no vote yet
        # Its next heartbeat, free now, brings the commit again.
        assert coord.unreported("n1", None) == [Send("commit", "new", "n1")]
    assert coord.stale_busy_nacks == 2
    # A node still busy after that votes no, saying why.
    coord.reply(nack("new", "busy with job old", seq=20), T0 + 3)
    record = coord.jobs["new"].nodes["n1"]
    assert (record.state.value, record.reason) == ("nacked", "busy with job old")


def test_a_busy_nack_naming_a_live_job_counts_at_once() -> None:
    coord = Coordinator()
    submit(coord, "old")
    submit(coord, "new")  # old still votes on n1: n1 is really busy with it
    coord.reply(nack("new", "busy with job old", seq=10), T0 + 2)
    assert coord.jobs["new"].nodes["n1"].state.value == "nacked"
    coord.reply(nack("new", "not whitelisted", seq=11, sender="n2"), T0 + 2)
    assert coord.jobs["new"].nodes["n2"].state.value == "nacked"
    assert coord.stale_busy_nacks == 0
