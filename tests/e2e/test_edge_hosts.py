"""An edge on another host: ``pushjobs-edge`` in a network namespace of the test's own
(``pushjobs.testbed.netns``), the log on a real Kafka broker both hosts reach, real agents
here. The test host has two links to this machine: the leader's edge channel and the
broker over one, the nodes' traffic over the other.

- Partitioned mid-job (the first link down): the edge still hears its nodes, but neither
  its leader nor the log. It must stop sending commands (no grant holds:
  ``server.core.edgelease``) and serving; its nodes must be re-homed onto the leader's own
  edge, their job complete, each node run once, nobody judged offline or crashed for what
  the cut-off edge could not see. With the link back, the edge finds the leader, joins.
- Cut off mid-job (both links down, as a host whose network failed): the same.

Skipped, saying why, where namespaces cannot be made (not root, no iproute2); the broker
is required where ``PUSHJOBS_REQUIRE_KAFKA`` is set, as everywhere else.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
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
    nodes_link = far_host.second_link()
    for node in NODES:  # their command sockets where the far edge can reach them too
        sandbox.write_agent_config(node, command_bind=f"tcp://{nodes_link.near}:*")
    try:
        sandbox.start_server(timeout_s=60)
        # Its nodes' sockets on the second link, its leader and log over the first.
        sandbox.start_edge(FAR, prefix=far_host.argv(), bind_host=nodes_link.far, timeout_s=60)
        sandbox.start_agents()
        fleet.wait_online()
        yield fleet
    finally:
        far_host.join()
        nodes_link.join()
        fleet.close()


def edges(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {row["edge"]: row for row in fleet.call("server.info")["edges"]}


def on_far() -> list[str]:
    return [n for n in NODES if rendezvous.pick(n, ["server-e0", FAR]) == FAR]


def cut_mid_job(fleet: Fleet, cut: list[Callable[[], None]], runs: int) -> float:
    """Start a slow job, cut ``cut`` once every node runs it, wait for the job: complete,
    each node run once more (``runs`` in all), every node online through the leader's own
    edge, none judged offline. The seconds from the cut to the last node re-homed."""
    before = fleet.call("server.info")["transitions"]["offline"]
    job = fleet.start("count-slowly")
    for node in NODES:
        fleet.wait_node_state(job["job_id"], node, "running")
    for step in cut:
        step()
    cut_at = time.monotonic()
    done = fleet.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete", done
    assert done["summary"] == {"succeeded": len(NODES)}, done
    for node in NODES:
        assert (fleet.root / f"count-{node}").read_text().split() == ["x"] * runs, node
    wait_until(lambda: edges(fleet)["server-e0"]["online"] == len(NODES), 30, 0.1)
    rehomed_s = time.monotonic() - cut_at
    assert not edges(fleet)[FAR]["live"]
    assert fleet.call("server.info")["transitions"]["offline"] == before
    return rehomed_s


def test_an_edge_on_another_host_serves_its_share_partitioned_or_cut_off(
    fleet: Fleet, far_host: netns.TestHost
) -> None:
    assert on_far(), "the names must put a node on the far edge"
    wait_until(lambda: edges(fleet)[FAR]["online"] == len(on_far()), 20, 0.1)
    nodes_link = far_host.second_link()
    assert edges(fleet)[FAR]["endpoints"]["reply"].startswith(f"tcp://{nodes_link.far}:")
    # Partitioned: its nodes still reach it, its leader and the log do not.
    partitioned_s = cut_mid_job(fleet, [far_host.cut], runs=1)
    print(f"partitioned: re-homed {len(on_far())} nodes in {partitioned_s:.1f} s")
    log = (fleet.root / "logs" / f"{FAR}.log").read_text()
    assert "looking for the leader" in log  # it stopped serving the leader it lost
    # Back on the network, the edge reads the control topic, finds the leader, joins.
    far_host.join()
    wait_until(lambda: edges(fleet)[FAR]["live"], 60, 0.2)
    # Every node onto it (the leader's own edge drained, then taken back), then the host
    # cut off altogether, as a host whose network failed.
    fleet.call("server.drain", {"edge": "server-e0"})
    wait_until(lambda: edges(fleet)[FAR]["online"] == len(NODES), 60, 0.1)
    fleet.call("server.drain", {"edge": "server-e0", "undo": True})
    cut_s = cut_mid_job(fleet, [far_host.cut, nodes_link.cut], runs=2)
    print(f"cut off: re-homed {len(NODES)} nodes in {cut_s:.1f} s")
