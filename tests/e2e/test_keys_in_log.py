"""The key registry in the ordered log, end to end: two servers share keys with no shared file.

The first server imports the sandbox's ``registry.json`` (the admin) at its start; the
second has a registry path of its own where no file ever exists. A node's key accepted
through the API (asked of the standby first: it sends the CLI to the leader) lets the
node in on the leader, and, after the leader is killed, on the server that takes over,
whose ZAP check and enrolment read the keys from the log alone. On SQLite (one host, one
log file) and on Kafka: a real broker (the session's, under a topic prefix of the test's
own), or librdkafka's mock cluster in a process of its own where no broker can run.
"""

from __future__ import annotations

import contextlib
import signal
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keys.identity import b64, generate
from keys.importer import imported_path
from pushjobs.api.client import ApiClient
from pushjobs.testbed.sandbox import ANY_PORT, Sandbox
from pushjobs.testbed.tomlwrite import toml_text
from tests.e2e import standby as two
from tests.e2e.conftest import WHITELIST
from tests.kafka_broker import broker_or_skip, mock_unless_broker, server_log
from tests.log import kafka_support
from tests.support import wait_until

pytestmark = pytest.mark.e2e

LOG_KEYS = {"key_store": "log", "config_lifetime_s": 3.0}
KAFKA_SESSION_MS = 3000
TAKEOVER_S = 30.0  # generous: other workers share the machine


class Pair:
    def __init__(self, sandbox: Sandbox, standby_api: str, standby_registry: Path) -> None:
        self.sandbox = sandbox
        self.standby_api = standby_api
        self.standby_registry = standby_registry
        keys = sandbox.root / "keys"
        self.client = ApiClient.from_files(
            [standby_api, sandbox.api],
            keys / "server.pub",
            keys / f"{sandbox.user}.key",
            timeout_s=15.0,
        )

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.call(method, params or {})

    def online(self, name: str) -> bool:
        rows = self.call("node.list")["nodes"]
        return any(row["name"] == name and row["online"] for row in rows)

    def run(self, command: str, node: str) -> dict[str, Any]:
        job = self.call("job.start", {"command": command, "nodes": [node]})["job"]

        def ended() -> dict[str, Any] | None:
            status: dict[str, Any] = self.call("job.status", {"job_id": job["job_id"]})["job"]
            return status if status["state"] not in ("new", "voting", "running") else None

        return wait_until(ended, 30, 0.05)


@contextlib.contextmanager
def log_table(backend: str) -> Iterator[dict[str, object]]:
    """The servers' ``[log]``: the sandbox's SQLite file, the session's Kafka broker, or a
    fresh mock Kafka cluster."""
    if backend == "sqlite":
        yield {}
        return
    if backend == "kafka-broker":
        yield server_log(broker_or_skip())
        return
    mock_unless_broker()
    reason = kafka_support.available()
    if reason:
        pytest.skip(reason)
    host = kafka_support.MockClusterHost(session_timeout_ms=KAFKA_SESSION_MS)
    try:
        cluster = host.new_cluster(KAFKA_SESSION_MS)
        try:
            yield two.kafka_log(cluster)
        finally:
            cluster.close()
    finally:
        host.close()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("kafka", marks=pytest.mark.kafka),
        pytest.param("kafka-broker", marks=pytest.mark.kafka),
    ]
)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    with log_table(request.param) as log:
        extra: dict[str, dict[str, object]] = {"server": LOG_KEYS}
        if log:
            extra["log"] = log
        sandbox = Sandbox(
            tmp_path / "fleet",
            whitelist=WHITELIST,
            nodes=["node-1"],
            accept_nodes=False,
            server_extra=extra,
        ).prepare()
        standby_registry = tmp_path / "b" / "registry.json"  # never written: no file shared
        try:
            sandbox.start_server()
            config = tomllib.loads(sandbox.server_config_path.read_text())
            binds = ("api_bind", "heartbeat_bind", "reply_bind")
            config["server"].update(dict.fromkeys(binds, ANY_PORT))
            config["server"]["registry"] = str(standby_registry)
            two.second_config(sandbox).write_text(toml_text(config))
            standby = two.start_second_server(sandbox)
            assert "leader=no" in standby.ready_line, standby.ready_line
            for name in sandbox.nodes:
                sandbox.write_agent_config(name, servers=[sandbox.api, two.api_of(standby)])
            sandbox.start_agents()
            pair = Pair(sandbox, two.api_of(standby), standby_registry)
            try:
                yield pair
            finally:
                pair.client.close()
        finally:
            sandbox.stop()


def test_a_key_accepted_on_the_leader_is_honoured_by_the_standby_after_takeover(
    pair: Pair,
) -> None:
    sandbox = pair.sandbox
    assert not sandbox.registry_path.exists()
    assert imported_path(sandbox.registry_path).exists()
    assert "imported 1 entries" in sandbox.procs["server"].log_text()

    def pending() -> bool:
        keys = pair.call("key.list", {"state": "pending"})["keys"]
        return [k["name"] for k in keys] == ["node-1"]

    wait_until(pending, 20, 0.1)
    # Asked of the standby first: it says "not the leader", and the client goes on.
    results = pair.call("key.accept", {"names": ["node-1"]})["results"]
    assert results == [{"name": "node-1", "ok": True, "previous": "pending", "state": "accepted"}]
    assert pair.client.endpoint == sandbox.api
    # A client that knows only the standby is told where the leader is, and goes there at
    # once (it used to wait out its timeout: "no server leads", exit 6).
    told: list[str] = []
    keys = sandbox.root / "keys"
    with ApiClient.from_files(
        [pair.standby_api], keys / "server.pub", keys / f"{sandbox.user}.key", on_wait=told.append
    ) as only_standby:
        carol = generate("carol", "user").public
        params = {
            "name": "carol",
            "kind": "user",
            "ed25519_public": b64(carol.ed25519_public),
            "curve_public": carol.curve_public,
            "role": "reader",
            "accept": True,
        }
        assert only_standby.call("key.add", params)["key"]["state"] == "accepted"
        assert only_standby.endpoint == sandbox.api and told == []
    wait_until(lambda: pair.online("node-1"), 20, 0.1)
    assert pair.run("hello", "node-1")["state"] == "complete"

    sandbox.kill("server", signal.SIGKILL)
    wait_until(lambda: pair.call("server.info")["leader"], TAKEOVER_S, 0.1)
    assert pair.client.endpoint == pair.standby_api
    # The node's key was never in a file this server reads: it comes from the log.
    wait_until(lambda: pair.online("node-1"), TAKEOVER_S, 0.1)
    done = pair.run("hello", "node-1")
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 1}, done

    # The new leader writes keys too; what it writes is in the log, not in a file.
    bob = generate("bob", "user").public
    added = pair.call(
        "key.add",
        {
            "name": "bob",
            "kind": "user",
            "ed25519_public": b64(bob.ed25519_public),
            "curve_public": bob.curve_public,
            "role": "reader",
            "accept": True,
        },
    )["key"]
    assert added["state"] == "accepted"
    assert not pair.standby_registry.exists()
    # And revoking the node on it cuts the node off there.
    pair.call("key.reject", {"names": ["node-1"]})
    wait_until(lambda: not pair.online("node-1"), 30, 0.1)
