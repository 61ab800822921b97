"""A job's node changes of one turn are written as ``node_states`` records, the nodes gone
online or offline in a turn as ``node_liveness`` records, and the archive reads them back
as the rows one record per change used to give."""

from __future__ import annotations

import orjson
import pytest

from pushjobs.errors import Rejected
from pushjobs.pipeline import events
from pushjobs.protocol.messages import JobOutput
from pushjobs.states import NodeState
from server.core import records
from server.core.coordinator import JobCreated, OutputReceived
from server.core.effects import JobChanged, NodeChanged
from server.core.job import Job

T0 = 1_700_000_000_000
NODES = ["a", "b", "c"]


def new_job(nodes: list[str] = NODES) -> Job:
    return Job.new("j1", "uptime", nodes, T0, vote_timeout_ms=1000, run_timeout_ms=5000)


def one_per_change(changes: list, job: Job) -> list[dict]:
    """The rows of the old format, one event record per node change, built here from its
    definition (a node's duration from the job's runs)."""
    rows = []
    for c in changes:
        if isinstance(c, NodeChanged):
            started = job.run_started_ms
            rows.append(
                {
                    "ts": c.at_ms,
                    "kind": "node_state",
                    "job_id": "j1",
                    "node": c.node,
                    "state": c.state.value,
                    "prev_state": c.prev.value,
                    "command": "uptime",
                    "exit_status": c.exit_status,
                    "duration_ms": None if started is None else max(0, c.at_ms - started),
                    "server": "s1",
                }
            )
    return rows


def archived(written: list[tuple[str, bytes]]) -> list[dict]:
    out = []
    for offset, (_, value) in enumerate(written):
        out += events.rows(offset, value)
    return out


def whole_life(job: Job) -> list:
    changes: list = [JobCreated("j1", T0)]
    changes += job.start(NODES, T0)
    for i, n in enumerate(NODES):
        changes += job.ack_commit(n, T0 + 1 + i)
    for n in NODES:
        changes += job.ack_run(n, T0 + 4)
    changes += job.succeeded("a", T0 + 5)
    changes += job.succeeded("b", T0 + 5, exit_status=0)
    changes += job.succeeded("c", T0 + 6)
    return changes


def test_a_turns_node_changes_are_one_record_between_the_jobs_own_changes():
    job = new_job()
    changes = whole_life(job)
    written = records.job_events(changes, {"j1": job}, "s1")
    kinds = [orjson.loads(v)["kind"] for _, v in written]
    # created, voting, the three votes, running, the runs and ends, complete
    assert kinds == [
        "job_created",
        "job_state",
        "node_states",
        "job_state",
        "node_states",
        "job_state",
    ]
    assert all(key == "job:j1" for key, _ in written)
    groups = [orjson.loads(v) for _, v in written if b'"node_states"' in v]
    assert [len(g["nodes"]) for g in groups] == [3, 6]
    node_rows = [r for r in archived(written) if r["kind"] == "node_state"]
    expected = one_per_change(changes, job)
    assert [{k: r[k] for k in expected[0]} for r in node_rows] == expected
    assert len(expected) == 9


def test_node_changes_after_a_change_of_the_job_open_a_record_of_their_own():
    job = new_job()
    changes = [
        NodeChanged("j1", "a", NodeState.NEW, NodeState.READY, T0),
        JobChanged("j1", job.state, job.state, T0),
        NodeChanged("j1", "b", NodeState.NEW, NodeState.READY, T0 + 1),
    ]
    written = records.job_events(changes, {"j1": job}, "s1")
    assert [orjson.loads(v)["kind"] for _, v in written] == [
        "node_states",
        "job_state",
        "node_states",
    ]


def test_a_nodes_output_does_not_split_the_turns_record():
    job = new_job()
    out = JobOutput(stdout="hi")
    changes = [
        NodeChanged("j1", "a", NodeState.NEW, NodeState.READY, T0),
        OutputReceived("j1", "a", out, 0),
        NodeChanged("j1", "b", NodeState.NEW, NodeState.READY, T0),
    ]
    written = records.job_events(changes, {"j1": job}, "s1")
    kinds = [orjson.loads(v)["kind"] for _, v in written]
    assert kinds == ["node_states", "output"]
    assert [e[0] for e in orjson.loads(written[0][1])["nodes"]] == ["a", "b"]


def test_many_nodes_with_long_names_and_reasons_split_under_the_record_limit():
    names = [f"{i:05d}-" + "x" * 200 for i in range(5000)]
    job = new_job(names)
    reason = "\x01" * 50  # escaped as six bytes each
    changes = [
        NodeChanged("j1", n, NodeState.NEW, NodeState.UNAVAILABLE, T0, reason=reason) for n in names
    ]
    written = records.job_events(changes, {"j1": job}, "s1")
    assert len(written) > 1
    assert max(len(v) for _, v in written) <= records.NODE_STATES_BYTES
    rows = archived(written)
    assert [r["node"] for r in rows] == names  # every one, in order
    assert {r["state"] for r in rows} == {"unavailable"}


def test_a_damaged_node_states_record_is_rejected_whole():
    good = [["a", "ready", "new", T0, None, None, None]]
    head = {"ts": T0, "kind": "node_states", "job_id": "j1", "command": "c", "server": "s"}
    assert len(events.rows(7, orjson.dumps({**head, "nodes": good * 2}))) == 2
    assert {r["offset"] for r in events.rows(7, orjson.dumps({**head, "nodes": good}))} == {7}
    with pytest.raises(Rejected, match="without nodes"):
        events.rows(7, orjson.dumps({**head, "nodes": []}))
    with pytest.raises(Rejected, match="not a list of 7"):
        events.rows(7, orjson.dumps({**head, "nodes": [*good, ["b", "ready"]]}))
    with pytest.raises(Rejected, match="entry: ts is not"):
        events.rows(
            7, orjson.dumps({**head, "nodes": [*good, ["b", "ready", "new", "x"] + [None] * 3]})
        )
    with pytest.raises(Rejected, match="entry: node_state without node"):
        events.rows(
            7, orjson.dumps({**head, "nodes": [[None, "ready", "new", T0, None, None, None]]})
        )
    with pytest.raises(Rejected, match="2 events in one record"):
        events.parse(7, orjson.dumps({**head, "nodes": good * 2}))


def one_liveness_record(change: records.LivenessChange) -> dict:
    """The row of the old format, a record per node gone online or offline."""
    row = {name: None for name, _ in events.COLUMNS if name != "offset"}
    kind = "node_" + change.state
    return {
        **row,
        "ts": change.ts,
        "kind": kind,
        "node": change.node,
        "state": change.state,
        "server": "s1",
    }


def test_a_turns_liveness_changes_are_one_record_read_back_as_the_old_rows():
    changes = [records.LivenessChange(f"n{i}", "online", T0 + i) for i in range(1000)]
    changes.append(records.LivenessChange("m", "offline", T0 + 5, "no heartbeat for 3.0 s"))
    written = records.liveness_events(changes, "s1")
    assert len(written) == 1 and written[0][0] == records.LIVENESS_KEY
    rows = [{k: v for k, v in r.items() if k != "offset"} for r in archived(written)]
    assert rows == [one_liveness_record(c) for c in changes]


def test_a_node_twice_in_a_turn_opens_a_record_so_its_order_holds_on_ts_and_offset():
    flap = [
        records.LivenessChange("a", "online", T0),
        records.LivenessChange("b", "online", T0),
        records.LivenessChange("a", "offline", T0, "restarted"),
        records.LivenessChange("a", "online", T0),
    ]
    written = records.liveness_events(flap, "s1")
    assert [[e[0] for e in orjson.loads(v)["nodes"]] for _, v in written] == [
        ["a", "b"],
        ["a"],
        ["a"],
    ]
    rows = archived(written)  # offsets 0, 1, 2: each of a's rows its own
    ordered = sorted((r for r in rows if r["node"] == "a"), key=lambda r: (r["ts"], r["offset"]))
    assert [r["kind"] for r in ordered] == ["node_online", "node_offline", "node_online"]


def test_a_fleet_with_long_names_comes_online_in_records_under_the_limit():
    names = [f"{i:06d}-" + "y" * 120 for i in range(20_000)]
    changes = [records.LivenessChange(n, "offline", T0, "\x02" * 20) for n in names]
    written = records.liveness_events(changes, "s1")
    assert 1 < len(written) < 200
    assert max(len(v) for _, v in written) <= records.NODE_STATES_BYTES
    assert [r["node"] for r in archived(written)] == names


def test_a_damaged_node_liveness_record_is_rejected_whole():
    head = {"ts": T0, "kind": "node_liveness", "server": "s"}
    good = [["a", "online", T0, None]]
    assert [r["kind"] for r in events.rows(3, orjson.dumps({**head, "nodes": good}))] == [
        "node_online"
    ]
    with pytest.raises(Rejected, match="node_liveness without nodes"):
        events.rows(3, orjson.dumps(head))
    with pytest.raises(Rejected, match="state is not one of online, offline"):
        events.rows(3, orjson.dumps({**head, "nodes": [*good, ["b", "gone", T0, None]]}))
    with pytest.raises(Rejected, match="state is not one of"):
        events.rows(3, orjson.dumps({**head, "nodes": [["b", 7, T0, None]]}))
    with pytest.raises(Rejected, match="entry: node_online without node"):
        events.rows(3, orjson.dumps({**head, "nodes": [["", "online", T0, None]]}))
    with pytest.raises(Rejected, match="not a list of 4"):
        events.rows(3, orjson.dumps({**head, "nodes": [["a", "online", T0]]}))
