"""Compaction for real: a server restored from topics a Kafka broker compacted has the
jobs, keys and schedules it had, and what was deleted stays deleted.

A fleet on the session's broker (its own ``topic_prefix``), its key registry in the log.
Its compacted topics get segment and cleaner settings small enough for the broker's log
cleaner to act within the test (``speed_up``): segments roll 100 ms after they begin, any
dirt is worth cleaning, tombstones may go 100 ms after they were first cleaned. The
cleaner never touches a partition's active segment, so the test keeps nudging each topic
(one more job, a role changed, a schedule paused and resumed) until the cleaner has
dropped superseded records from the jobs' topics and the tombstones of a deleted key and
a deleted schedule from theirs. Then the server is killed and started again: everything
it knows it reads back from what the cleaner left.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keys.identity import b64, generate
from pushjobs.log.base import OrderedLog
from pushjobs.log.kafka.kafka_log import KafkaLog
from pushjobs.log.topics import names
from server.core.schedshards import DEFAULT_PARTITIONS, partition_of
from tests.e2e.conftest import Fleet, make_fleet
from tests.kafka_broker import broker_or_skip, server_log
from tests.support import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]

CLEANER_WAIT_S = 60.0


@pytest.fixture
def kafka_fleet(tmp_path: Path) -> Iterator[tuple[Fleet, str, str]]:
    """Two nodes and a server on the broker, keys in the log; its bootstrap and prefix."""
    cluster = broker_or_skip()
    log_table = server_log(cluster)
    fleet = make_fleet(
        tmp_path,
        nodes=["node-1", "node-2"],
        server_extra={"server": {"key_store": "log"}, "log": log_table},
    )
    try:
        fleet.wait_online()
        yield fleet, cluster.bootstrap, str(log_table["topic_prefix"])
    finally:
        fleet.close()


def speed_up(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    settings = {
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100",
    }
    resources = [
        ConfigResource(
            "topic",
            topic,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in settings.items()
            ],
        )
        for topic in topics
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answers
    for future in admin.incremental_alter_configs(resources).values():
        future.result(timeout=10)


def add_user(fleet: Fleet, name: str) -> None:
    public = generate(name, "user").public
    fleet.call(
        "key.add",
        {
            "name": name,
            "kind": "user",
            "ed25519_public": b64(public.ed25519_public),
            "curve_public": public.curve_public,
            "role": "reader",
            "accept": True,
        },
    )


def run(fleet: Fleet, command: str = "true") -> str:
    job = fleet.start(command)
    assert fleet.wait_job(job["job_id"])["state"] == "complete"
    return str(job["job_id"])


def add_schedule(fleet: Fleet) -> str:
    request = {"command": "true", "nodes": ["node-1"], "at": "2030-01-01T03:00Z"}
    return str(fleet.call("schedule.add", request)["schedule"]["schedule_id"])


def state(fleet: Fleet) -> dict[str, Any]:
    """What the server knows: every job (state, nodes), key and schedule."""
    jobs = fleet.call("job.list", {"limit": 1000})["jobs"]
    keys = fleet.call("key.list", {})["keys"]
    schedules = fleet.call("schedule.list", {})["schedules"]
    return {
        "jobs": {j["job_id"]: (j["state"], fleet.status(j["job_id"])["nodes"]) for j in jobs},
        "keys": {k["name"]: (k["state"], k.get("role")) for k in keys},
        "schedules": {s["schedule_id"]: (s["paused"], s["next_due_ms"]) for s in schedules},
    }


def gaps(log: OrderedLog, topic: str) -> bool:
    """Whether the cleaner has removed records from ``topic``."""
    records = log.read(topic, 0, limit=100_000)
    start = records[0].offset if records else log.end_offset(topic)
    return len(records) < log.end_offset(topic) - start


def holds(log: OrderedLog, topic: str, key: str) -> bool:
    return any(r.key == key for r in log.read(topic, 0, limit=100_000))


def test_a_server_restored_from_compacted_topics_has_what_it_had(kafka_fleet) -> None:
    fleet, bootstrap, prefix = kafka_fleet
    topics = names(prefix)
    schedule_topics = [f"{topics.schedules}.{i}" for i in range(DEFAULT_PARTITIONS)]
    speed_up(bootstrap, [topics.commands, topics.assignments, topics.keys, *schedule_topics])

    for _ in range(3):
        run(fleet)
    # An abort is the command that supersedes a job's start (the same key).
    aborted = fleet.start("sleep-30")["job_id"]
    fleet.wait_node_state(aborted, "node-1", "running")
    fleet.call("job.abort", {"job_id": aborted})
    assert fleet.wait_job(aborted)["state"] == "aborted"
    add_user(fleet, "carol")
    add_user(fleet, "dave")
    fleet.call("key.role", {"name": "carol", "role": "writer"})  # supersedes carol's entry
    fleet.call("key.delete", {"names": ["dave"]})  # a tombstone
    # Nine schedules in eight partitions: two share one; one of them is deleted, the
    # other nudges that partition until the cleaner has taken the tombstone away.
    ids = [add_schedule(fleet) for _ in range(DEFAULT_PARTITIONS + 1)]
    by_partition: dict[int, list[str]] = {}
    for sid in ids:
        by_partition.setdefault(partition_of(sid, DEFAULT_PARTITIONS), []).append(sid)
    deleted, nudger = next(pair for pair in by_partition.values() if len(pair) > 1)[:2]
    fleet.call("schedule.delete", {"schedule_id": deleted})
    deleted_topic = f"{topics.schedules}.{partition_of(deleted, DEFAULT_PARTITIONS)}"

    log = KafkaLog(bootstrap, client_id="compaction-test")
    try:
        role = iter(["reader", "writer"] * 1000)

        seen: dict[str, bool] = {}

        def cleaned() -> bool:
            # One more record in each topic rolls the segment before it, for the cleaner.
            run(fleet)
            fleet.call("key.role", {"name": "carol", "role": next(role)})
            fleet.call("schedule.pause", {"schedule_id": nudger})
            fleet.call("schedule.resume", {"schedule_id": nudger})
            seen.update(
                commands=gaps(log, topics.commands),
                assignments=gaps(log, topics.assignments),
                key_tombstone_gone=not holds(log, topics.keys, "key:dave"),
                schedule_tombstone_gone=not any(
                    deleted in r.key for r in log.read(deleted_topic, 0, 100_000)
                ),
            )
            return all(seen.values())

        try:
            wait_until(cleaned, CLEANER_WAIT_S, step_s=0.2)
        except AssertionError as exc:
            raise AssertionError(f"not cleaned within {CLEANER_WAIT_S} s: {seen}") from exc
    finally:
        log.close()

    before = state(fleet)
    assert "dave" not in before["keys"] and before["keys"]["carol"][0] == "accepted"
    assert deleted not in before["schedules"] and nudger in before["schedules"]
    assert len(before["jobs"]) >= 5
    assert before["jobs"][aborted][0] == "aborted"
    assert {s for s, _ in before["jobs"].values()} == {"complete", "aborted"}

    fleet.sandbox.kill("server")  # SIGKILL: it keeps nothing but what is in the log
    fleet.reconnect()
    fleet.sandbox.start_server()
    after = wait_until(lambda: fleet.call_served("job.list", {"limit": 1000}) and state(fleet), 30)
    assert after == before
