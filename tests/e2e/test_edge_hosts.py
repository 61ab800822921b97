"""An edge on another host: ``pushjobs-edge`` in a network namespace of the test's own
(``pushjobs.testbed.netns``), the log on a real Kafka broker both hosts reach, real agents
here. The edge's host is cut off from the network in the middle of a job (its link taken
down): its nodes must be re-homed onto the leader's own edge, their job complete, each
node run once, nobody judged offline or crashed for what the cut-off edge could not
see; with the link back, the edge finds the leader again and joins.

Skipped, saying why, where namespaces cannot be made (not root, no iproute2); the broker
is required where ``PUSHJOBS_REQUIRE_KAFKA`` is set, as everywhere else.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.testbed import netns
from pushjobs.testbed.kafkabroker import KafkaCluster
from pushjobs.testbed.sandbox import Sandbox
from server.core import rendezvous
from tests.e2e.conftest import WHITELIST, Fleet
from tests.kafka_broker import broker_unavailable
from tests.support import wait_until

NODES = [f"node-{i}" for i in range(1, 7)]
FAR = "far-1"

_why = netns.unavailable()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"no test hosts here: {_why}")


@pytest.fixture(scope="module")
def far_host() -> Iterator[netns.TestHost]:
    host = netns.make(0)
    try:
        yield host
    finally:
        host.remove()


@pytest.fixture(scope="module")
def cluster(far_host: netns.TestHost, tmp_path_factory: pytest.TempPathFactory):
    why = broker_unavailable()
    if why is not None:
        if os.environ.get("PUSHJOBS_REQUIRE_KAFKA"):
            pytest.fail(f"a Kafka broker is required here: {why}")
        pytest.skip(why)
    # Listening on this machine's end of the link: the far host reaches it there.
    with KafkaCluster(tmp_path_factory.mktemp("kafka"), nodes=1, host=far_host.near) as c:
        yield c


@pytest.fixture
def fleet(tmp_path: Path, far_host: netns.TestHost, cluster: KafkaCluster) -> Iterator[Fleet]:
    log = {
        "backend": "kafka",
        "bootstrap_servers": cluster.bootstrap,
        "topic_prefix": f"h{uuid.uuid4().hex[:6]}.",
    }
    extra = {"server": {"edges": 1, "edge_bind": f"tcp://{far_host.near}:0"}, "log": log}
    sandbox = Sandbox(tmp_path / "fleet", nodes=NODES, whitelist=WHITELIST, server_extra=extra)
    fleet = Fleet(sandbox.prepare())
    for node in NODES:  # their command sockets where the far edge can reach them too
        sandbox.write_agent_config(node, command_bind=f"tcp://{far_host.near}:*")
    try:
        sandbox.start_server(timeout_s=60)
        sandbox.start_edge(FAR, prefix=far_host.argv(), bind_host=far_host.far, timeout_s=60)
        sandbox.start_agents()
        fleet.wait_online()
        yield fleet
    finally:
        far_host.join()
        fleet.close()


def edges(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {row["edge"]: row for row in fleet.call("server.info")["edges"]}


def on_far() -> list[str]:
    return [n for n in NODES if rendezvous.pick(n, ["server-e0", FAR]) == FAR]


def test_an_edge_on_another_host_serves_its_share_and_survives_its_host_cut_off(
    fleet: Fleet, far_host: netns.TestHost
) -> None:
    assert on_far(), "the names must put a node on the far edge"
    wait_until(lambda: edges(fleet)[FAR]["online"] == len(on_far()), 20, 0.1)
    assert edges(fleet)[FAR]["endpoints"]["reply"].startswith(f"tcp://{far_host.far}:")
    before = fleet.call("server.info")["transitions"]["offline"]
    job = fleet.start("count-slowly")
    for node in NODES:
        fleet.wait_node_state(job["job_id"], node, "running")
    far_host.cut()
    cut_at = time.monotonic()
    done = fleet.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete", done
    assert done["summary"] == {"succeeded": len(NODES)}, done
    for node in NODES:
        assert (fleet.root / f"count-{node}").read_text().split() == ["x"], node
    # Re-homed: every node online through the leader's own edge, none judged offline.
    wait_until(lambda: edges(fleet)["server-e0"]["online"] == len(NODES), 30, 0.1)
    rehomed_s = time.monotonic() - cut_at
    assert not edges(fleet)[FAR]["live"]
    assert fleet.call("server.info")["transitions"]["offline"] == before
    print(f"re-homed {len(on_far())} nodes {rehomed_s:.1f} s after the cut")
    # Back on the network, the edge reads the control topic, finds the leader, joins.
    far_host.join()
    wait_until(lambda: edges(fleet)[FAR]["live"], 60, 0.2)
    again = fleet.start("stamp")
    assert fleet.wait_job(again["job_id"])["summary"] == {"succeeded": len(NODES)}
