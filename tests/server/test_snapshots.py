"""Job snapshots in the log: a header plus node chunks, rewritten only where they changed."""

from __future__ import annotations

import random
from collections import Counter

import orjson

from pushjobs.log.memory import MemoryLog
from pushjobs.log.topics import create_standard_topics
from pushjobs.quorum import Quorum
from pushjobs.states import NodeState
from server.core.coordinator import Coordinator
from server.core.job import Job
from server.core.records import snapshot_records, touched_chunks
from server.core.records import start_records as start_request_records
from server.core.snapshot import CHUNK_NODES
from server.shell.recovery import recover

T0 = 1_700_000_000_000


def big_job(coord: Coordinator, n: int) -> list[str]:
    names = [f"n{i:05d}" for i in range(n)]
    coord.submit(
        "j1",
        "true",
        names,
        names,
        T0,
        quorum=Quorum(),
        vote_timeout_ms=60_000,
        run_timeout_ms=60_000,
        options={},
        requested_by="alice",
    )
    return names


def test_a_reply_rewrites_the_header_and_one_chunk_only():
    coord = Coordinator()
    names = big_job(coord, 3 * CHUNK_NODES + 7)
    job = coord.jobs["j1"]
    assert job.chunks == 4
    out = job.ack_commit(names[CHUNK_NODES + 3], T0 + 5)
    dirty = touched_chunks(out, coord.jobs)
    assert dirty == {"j1": {1}}
    keys = [k for k, _ in snapshot_records(job, 2, dirty["j1"])]
    assert keys == ["job:j1", "job:j1/nodes/1"]
    header = orjson.loads(snapshot_records(job, 2, set())[0][1])
    assert (header["chunks"], header["targets"], header["version"]) == (4, len(names), 2)
    assert "nodes" not in header


def test_every_record_stays_small_whatever_the_reasons():
    coord = Coordinator()
    names = big_job(coord, CHUNK_NODES)
    job = coord.jobs["j1"]
    for name in names:
        job.nack_commit(name, T0 + 1, "x" * 100_000)  # a node may say anything
    records = snapshot_records(job, 1)
    assert max(len(v) for _, v in records) < 1024 * 1024


def test_recovery_puts_a_chunked_job_back_together():
    log = MemoryLog()
    topics = create_standard_topics(log)
    coord = Coordinator()
    names = big_job(coord, 2 * CHUNK_NODES + 1)
    job = coord.jobs["j1"]
    log.append_batch(topics.assignments, snapshot_records(job, 1))
    job.ack_commit(names[-1], T0 + 9)  # the last chunk changes, and only it is written
    log.append_batch(topics.assignments, snapshot_records(job, 2, {job.chunk_of(names[-1])}))
    found = recover(log, topics)
    assert found.damaged == []
    [(restored, version)] = found.jobs
    assert version == 2
    assert restored.snapshot() == job.snapshot()
    assert restored.nodes[names[-1]].state is NodeState.READY


def test_a_missing_chunk_is_reported_not_guessed():
    log = MemoryLog()
    topics = create_standard_topics(log)
    coord = Coordinator()
    big_job(coord, CHUNK_NODES + 1)
    records = [r for r in snapshot_records(coord.jobs["j1"], 1) if not r[0].endswith("/1")]
    log.append_batch(topics.assignments, records)
    found = recover(log, topics)
    assert found.jobs == []
    assert len(found.damaged) == 1 and "chunks [1] missing" in found.damaged[0]


def test_an_unchunked_snapshot_from_before_still_restores():
    log = MemoryLog()
    topics = create_standard_topics(log)
    job = Job.new("old", "true", ["a", "b"], T0)
    log.append(topics.assignments, "job:old", orjson.dumps(job.snapshot()))
    [(restored, _)] = recover(log, topics).jobs
    assert restored.snapshot() == job.snapshot()


def test_counts_match_a_recount_through_random_replies():
    rng = random.Random(7)
    coord = Coordinator()
    names = big_job(coord, 300)
    job = coord.jobs["j1"]
    for name in rng.sample(names, 200):
        if rng.random() < 0.8:
            job.ack_commit(name, T0 + 1)
        else:
            job.nack_commit(name, T0 + 1, "busy")
    job.tick(T0 + 60_000)  # the rest never voted
    for name in names:
        if job.nodes[name].state is NodeState.READY and rng.random() < 0.5:
            job.succeeded(name, T0 + 2)
    recount = Counter(r.state.value for r in job.nodes.values())
    assert job.summary() == dict(sorted(recount.items()))
    assert job.all_succeeded() is (recount["succeeded"] == len(names))


def test_chunk_bytes_are_the_chunk_as_json_and_follow_every_change():
    coord = Coordinator()
    names = big_job(coord, 2 * CHUNK_NODES + 3)
    job = coord.jobs["j1"]

    def same() -> None:
        for i in range(job.chunks):
            assert job.chunk_bytes(i) == orjson.dumps(job.chunk(i))

    same()  # every row now cached
    job.ack_commit(names[0], T0 + 1)
    job.nack_commit(names[CHUNK_NODES], T0 + 2, 'says "no" \\ with ünïcode\n')
    same()
    for name in names[1:CHUNK_NODES]:
        job.ack_commit(name, T0 + 3)
    same()
    job.abort(T0 + 4, "operator changed their mind")
    same()
    restored = orjson.loads(job.chunk_bytes(2))["nodes"][names[-1]]
    assert restored["state"] == job.nodes[names[-1]].state.value == "aborted"


def test_a_job_in_500_node_chunks_from_before_keeps_its_layout():
    log = MemoryLog()
    topics = create_standard_topics(log)
    coord = Coordinator()
    names = big_job(coord, 1001)
    job = coord.jobs["j1"]
    job.chunk_nodes = 500  # as every job was written before headers named the size
    records = snapshot_records(job, 1)
    header = orjson.loads(records[0][1])
    del header["chunk_nodes"]
    log.append_batch(topics.assignments, [(records[0][0], orjson.dumps(header)), *records[1:]])
    [(restored, _)] = recover(log, topics).jobs
    assert (restored.chunk_nodes, restored.chunks) == (500, 3)
    restored.ack_commit(names[-1], T0 + 9)
    log.append_batch(
        topics.assignments, snapshot_records(restored, 2, {restored.chunk_of(names[-1])})
    )
    found = recover(log, topics)
    assert found.damaged == []
    assert found.jobs[0][0].nodes[names[-1]].state is NodeState.READY


def test_a_finished_job_keeps_no_encoded_rows():
    coord = Coordinator()
    names = big_job(coord, 2 * CHUNK_NODES)
    job = coord.jobs["j1"]
    for i in range(job.chunks):
        job.chunk_bytes(i)
    assert len(job._rows) == len(names)  # a live job caches every row it encoded
    job.abort(T0 + 1, "stop")
    assert job._rows == {}
    for i in range(job.chunks):
        assert job.chunk_bytes(i) == orjson.dumps(job.chunk(i))
    assert job._rows == {}  # the last write of a finished job leaves nothing behind


def start_request(names: list[str]) -> dict[str, object]:
    return {"type": "start", "job_id": "big", "command": "true", "targets": names}


def test_a_start_request_on_100000_nodes_is_chunked_under_the_value_limit_and_read_back():
    """100,000 names made one request of 1.2 MB: over the log's 1 MiB, the job never began."""
    log = MemoryLog()
    topics = create_standard_topics(log)
    names = [f"web-{i:06d}.example.org" for i in range(100_000)]
    records = start_request_records("big", start_request(names))
    assert len(records) > 1 and max(len(v) for _, v in records) < 1024 * 1024
    assert records[-1][0] == "job:big"  # the request itself last: written, it has its targets
    log.append_batch(topics.commands, records)
    found = recover(log, topics)
    assert found.damaged == []
    [request] = found.unstarted
    assert request["targets"] == names and "target_chunks" not in request


def test_a_small_start_request_stays_one_record() -> None:
    records = start_request_records("small", start_request(["a", "b"]))
    assert [k for k, _ in records] == ["job:small"]
    assert orjson.loads(records[0][1])["targets"] == ["a", "b"]


def test_a_start_request_missing_a_target_chunk_is_reported_not_started():
    log = MemoryLog()
    topics = create_standard_topics(log)
    names = [f"n{i:07d}" for i in range(200_000)]
    records = start_request_records("big", start_request(names))
    log.append_batch(topics.commands, [r for r in records if not r[0].endswith("/targets/1")])
    found = recover(log, topics)
    assert found.unstarted == []
    assert len(found.damaged) == 1 and "target chunks [1] missing" in found.damaged[0]
