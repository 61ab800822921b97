"""An edge sends job commands only under its leader's grant (``server.core.edgelease``).

A real edge (``server.edge.edged.Edge``, its loop on a thread here) on real CurveZMQ
sockets on 127.0.0.1; the test plays its leader on the edge channel and one node's
command socket. What an edge cut off from its leader but not from its nodes does is what
it does with no grant: its commands wait, and none reaches the node.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import zmq

from keys import files
from keys.identity import generate
from pushjobs.protocol import codec
from pushjobs.protocol.messages import Run
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain
from server.core import edgelease, edgewire
from server.edge.edged import Edge, EdgeSpec
from tests.support import curve_keys, wait_until

INTERVAL_S = 0.2  # a grant lasts 0.5 s at most
NODE = "node-1"


@dataclass
class Leader:
    """The test's end of the edge channel, and the node's command socket."""

    router: zmq.Socket[bytes]
    node: zmq.Socket[bytes]
    edge: Edge
    route: bytes = b""
    stamp: int | None = None
    load: dict[str, Any] | None = None
    loads: int = 0

    def read(self) -> None:
        """Everything the edge said: its route, its latest stamp and load."""
        for frames in drain(self.router, 1000):
            self.route = frames[0]
            kind, payload, _ = edgewire.decode(frames[1:], edgewire.TO_LEADER)
            self.stamp = edgewire.stamp_of(payload)
            if kind == edgewire.REPORT and payload.get("load"):
                self.load = payload["load"]
                self.loads += 1

    def tell(self, frames: list[bytes]) -> None:
        self.router.send_multipart([self.route, *frames])

    def two_more_loads(self) -> None:
        """Wait for two more load reports: what was told before is taken by then."""
        until = self.loads + 2
        wait_until(lambda: self.read() or self.loads >= until, 10)

    def fenced_times(self) -> int:
        self.read()
        return int((self.load or {}).get("counters", {}).get("fenced", 0))

    def commands(self) -> list[Run]:
        """The commands the node has received (bodies decoded; signatures are the node's
        business, tested elsewhere)."""
        out = []
        for frames in drain(self.node, 100):
            message = codec.decode(frames[1])
            assert isinstance(message, Run)
            out.append(message)
        return out

    def grant(self, for_ms: int = 60_000) -> None:
        self.read()
        assert self.stamp is not None
        self.tell(edgewire.encode_grant(self.stamp, for_ms))

    def run_on(self, job: str) -> None:
        self.tell(edgewire.encode(edgewire.SEND, {"kind": "run", "job": job, "nodes": [NODE]}))


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Leader]:
    identity = generate("server", "server")
    key_file, _ = files.save(identity, tmp_path / "keys")
    server_curve = CurveKeys(identity.public.curve_public, identity.curve_secret)
    node_curve = curve_keys()
    with Transport() as transport:
        router = transport.socket(
            "router",
            bind="tcp://127.0.0.1:0",
            curve_server=server_curve,
            allowed_clients=lambda key: key == server_curve.public,
        )
        node = transport.socket(
            "pull",
            bind="tcp://127.0.0.1:0",
            curve_server=node_curve,
            allowed_clients=lambda key: key == server_curve.public,  # the edge's, as a node's
        )
        spec = EdgeSpec(
            name="e0",
            server_name="server",
            key_file=str(key_file),
            leader_endpoint=bound_endpoint(router),
            bind_host="127.0.0.1",
            advertise_host="127.0.0.1",
            interval_s=INTERVAL_S,
            offline_threshold=3,
            online_threshold=1,
            max_skew_s=30.0,
            max_header_bytes=4096,
            max_body_bytes=65536,
            parent_pid=0,
        )
        edge = Edge(spec, out=io.StringIO())
        thread = threading.Thread(target=edge.run, daemon=True)
        thread.start()
        it = Leader(router, node, edge)
        try:
            wait_until(lambda: it.read() or it.route, 10)
            keys = [[NODE, "k1", "c2VjcmV0c2VjcmV0c2VjcmV0", False, node_curve.public,
                     bound_endpoint(node)]]  # fmt: skip
            it.tell(edgewire.encode(edgewire.KEYS, {"keys": keys, "batch": 1}))
            yield it
        finally:
            edge.stopping = True
            thread.join(timeout=10)
            edge.close()


def received(leader: Leader, count: int) -> list[Run]:
    got: list[Run] = []

    def enough() -> bool:
        got.extend(leader.commands())
        return len(got) >= count

    wait_until(enough, 10)
    return got


def test_commands_wait_for_a_grant_and_stop_when_it_lapses(leader: Leader) -> None:
    # Never granted: the command waits, and the edge says it is fenced.
    leader.run_on("job-1")
    wait_until(lambda: leader.fenced_times() >= 1, 10)
    assert leader.commands() == []
    assert leader.load is not None and leader.load["fenced"] is True

    leader.grant()
    assert [m.job_id for m in received(leader, 1)] == ["job-1"]

    # No grant since: the lease (0.5 s at most, whatever the leader asked) lapses.
    since = leader.loads
    wait_until(lambda: leader.read() or (leader.loads > since and leader.load["fenced"]), 10)
    leader.run_on("job-2")
    wait_until(lambda: leader.fenced_times() >= 2, 10)
    # A grant for a report long gone does not revive it, however long it says.
    leader.tell(edgewire.encode_grant(edgelease.stamp(0.0), 10**9))
    leader.two_more_loads()
    assert leader.load is not None and leader.load["fenced"] is True
    assert leader.commands() == []

    leader.grant()
    assert [m.job_id for m in received(leader, 1)] == ["job-2"]


def test_a_malformed_grant_is_refused_and_grants_nothing(leader: Leader) -> None:
    leader.run_on("job-1")
    leader.tell([edgewire.GRANT, orjson.dumps({"sent": "soon", "for_ms": 1000})])
    leader.tell([edgewire.GRANT, orjson.dumps({"sent": True, "for_ms": 1000})])

    def refused() -> bool:
        leader.read()
        counters = (leader.load or {}).get("counters", {})
        return int(counters.get("instructions_refused", 0)) >= 2

    wait_until(refused, 10)
    assert leader.commands() == []
