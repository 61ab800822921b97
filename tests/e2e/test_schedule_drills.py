"""Fault drills on schedules that collide (issue 27): two real servers on one SQLite log
and three agents, four schedules per node all due at the same instants (so their fires
reach each node together), the standby SIGSTOP'd past its session (its partitions move
and come back), then the leader killed -9. Every due time settled is one job, every job
ends ``complete`` (no fire refused ``busy``: each waits its turn on its node), no node
ran a job twice."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from pushjobs.log.topics import names
from pushjobs.testbed.sandbox import Sandbox
from server.core.schedshards import DEFAULT_PARTITIONS, count_topic, partition_topics
from tests.e2e.standby import SECOND, api_of, kafka_log, start_second_server
from tests.e2e.test_schedule_shards import (
    SESSION_MS,
    Client,
    host,
    let_fire,
    make_sandbox,
    online,
    paused_and_settled,
    stamps,
)
from tests.log.kafka_support import HostError, MockClusterHost, available
from tests.support import wait_until

pytestmark = pytest.mark.e2e
__all__ = ["host"]  # the mock Kafka cluster's fixture, shared with the shard test

PER_NODE = 4
SESSION_S = 1.5  # the sandbox's leader_session_s


@pytest.mark.drill  # 17 s: bench/drills.py (the suite: test_schedules.py, across server kills)
def test_colliding_fires_survive_a_stopped_standby_and_a_killed_leader(tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    try:
        drill(sandbox, stop_s=SESSION_S * 4)
    finally:
        sandbox.stop()


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_the_same_on_kafka(tmp_path: Path, host: MockClusterHost) -> None:
    cluster = host.new_cluster(SESSION_MS)
    try:
        # Single-partition, as the servers would create them (the mock would make four).
        sandbox = make_sandbox(tmp_path, kafka_log(cluster))
        base = names().schedules
        for topic in [*partition_topics(base, DEFAULT_PARTITIONS)[1:], count_topic(base)]:
            with contextlib.suppress(HostError):  # made already
                cluster.make_topic(topic)
        try:
            # Past the group's rebalance (about two and a half sessions) and back.
            drill(sandbox, stop_s=SESSION_MS / 1000 * 4)
        finally:
            sandbox.stop()
    finally:
        cluster.close()


def drill(sandbox: Sandbox, *, stop_s: float) -> None:
    sandbox.start_server()
    second = start_second_server(sandbox)
    both = [api_of(second), sandbox.api]
    for name in sandbox.nodes:
        sandbox.write_agent_config(name, servers=both)
    sandbox.start_agents()
    client = Client(sandbox, both)
    try:
        wait_until(lambda: online(client, sandbox.nodes), 30.0, 0.1)
        added: list[dict[str, Any]] = []
        for i in range(PER_NODE * len(sandbox.nodes)):
            params = {
                "command": "stamp",
                "nodes": [sandbox.nodes[i % len(sandbox.nodes)]],
                "cron": "*/3 * * * * *",  # every schedule due at once: they collide
                "catch_up": "all",
                "overlap": "queue",  # every due time runs: what is lost shows
            }
            added.append(client.call("schedule.add", params)["schedule"])
        let_fire(client, added)
        # The standby stops past its session: its partitions go to the leader; resumed,
        # it regains a share, with due times pending.
        os.kill(second.pid, signal.SIGSTOP)
        try:
            time.sleep(stop_s)  # a fault held on purpose (noqa: not a wait)
        finally:
            os.kill(second.pid, signal.SIGCONT)
        let_fire(client, added)
        sandbox.kill("server", signal.SIGKILL)  # the leader, mid-fire
        client.close()
        let_fire(client, added, timeout_s=60.0)  # server-b leads and owns every partition
        expected, found = paused_and_settled(client, added, 90.0)
        assert set(found) == expected  # every due time: one job, and no other job
        states = {state for state in found.values()}
        failed = {j: s for j, s in found.items() if s != "complete"}
        assert not failed, f"not complete: {failed} ({states})"
        ran = [job for node in sandbox.nodes for job in stamps(sandbox.root, node)]
        assert len(ran) == len(set(ran)) and set(ran) == expected  # each ran once
        history = client.call("schedule.history", {"schedule_id": added[0]["schedule_id"]})
        assert history is not None and history["fires"]
    finally:
        client.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(sandbox.procs[SECOND].pid, signal.SIGCONT)
