"""Schedules sharded over real servers on one SQLite log: two servers
own and fire a share of the partitions each; the leader is killed -9, later a third server
joins; every due time of every schedule produced exactly one job, and no node ran a job
twice.

Many schedules on three agents collide: a node runs one job at a time and refuses a commit
while busy (``nacked``), so which nodes ran a fire is not asserted, only that none ran one
twice and that the jobs exist, once each.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError, Unreachable
from pushjobs.log.topics import DEFAULT_PREFIX, names
from pushjobs.testbed.childproc import Proc, await_ready, spawn
from pushjobs.testbed.sandbox import ANY_PORT, Sandbox, ready_fields
from pushjobs.testbed.tomlwrite import toml_text
from server.core.schedshards import DEFAULT_PARTITIONS, count_topic, partition_topics
from server.core.schedule import fire_job_id
from tests.e2e.conftest import TERMINAL, WHITELIST
from tests.e2e.standby import api_of, kafka_log, start_second_server
from tests.kafka_broker import broker_or_skip, mock_unless_broker, server_log
from tests.log.kafka_support import HostError, MockClusterHost, available
from tests.support import wait_until

pytestmark = pytest.mark.e2e

THIRD = "server-c"
SCHEDULES = 40
OWNED = "owned here"  # the log line of a server gaining a partition
SESSION_MS = 3000  # the mock Kafka cluster's group session


def start_third_server(sandbox: Sandbox, timeout_s: float = 20.0) -> Proc:
    """``server-c``: the first server's config on ports of its own (as ``server-b``)."""
    path = sandbox.root / f"{THIRD}.toml"
    config = tomllib.loads(sandbox.server_config_path.read_text())
    config["server"].update(dict.fromkeys(("api_bind", "heartbeat_bind", "reply_bind"), ANY_PORT))
    config["server"]["metrics_bind"] = ""
    path.write_text(toml_text(config))
    argv = [sys.executable, "-m", "server", "--config", str(path)]
    proc = spawn(
        THIRD, argv, sandbox.root / "logs" / f"{THIRD}.log", env=sandbox.env(), cwd=sandbox.root
    )
    sandbox.procs[THIRD] = proc
    await_ready(proc, "pushjobs-server", timeout_s)
    return proc


class Client:
    """A client of every server started, following the leader; None while none leads."""

    def __init__(self, sandbox: Sandbox, endpoints: list[str]) -> None:
        self.sandbox, self.endpoints = sandbox, endpoints
        self.api: ApiClient | None = None

    def connect(self) -> ApiClient:
        if self.api is None:
            root = self.sandbox.root
            self.api = ApiClient.from_files(
                self.endpoints,
                root / "keys" / "server.pub",
                root / "keys" / f"{self.sandbox.user}.key",
                timeout_s=15.0,
            )
        return self.api

    def close(self) -> None:
        if self.api is not None:
            self.api.close()
            self.api = None

    def call(self, method: str, params: dict[str, Any]) -> Any:
        try:
            return self.connect().call(method, params)
        except Unreachable:
            self.close()
            return None
        except ApiError as exc:
            if exc.code == "not_leader":
                return None
            raise


def make_sandbox(tmp_path: Path, log: dict[str, object] | None = None) -> Sandbox:
    extra = {"log": log} if log is not None else {}
    return Sandbox(tmp_path / "fleet", whitelist=WHITELIST, server_extra=extra).prepare()


@pytest.fixture
def host() -> Iterator[MockClusterHost]:
    """A mock Kafka cluster host process, stopped by PID at the end (where no real broker
    runs the test instead)."""
    mock_unless_broker()
    host = MockClusterHost(session_timeout_ms=SESSION_MS)
    try:
        yield host
    finally:
        host.close()


def online(client: Client, nodes: list[str]) -> bool:
    found = client.call("node.status", {"nodes": nodes})
    return found is not None and all(row["online"] for row in found["nodes"])


def fired_since(client: Client, added: list[dict[str, Any]], since_ms: int) -> bool:
    """Whether every schedule has settled a due time after ``since_ms``: its partition's
    owner, whichever server it is by then, fired it."""
    rows = client.call("schedule.list", {})
    if rows is None:
        return False
    consumed = {row["schedule_id"]: row["consumed_ms"] for row in rows["schedules"]}
    return all(consumed[s["schedule_id"]] > since_ms for s in added)


def let_fire(client: Client, added: list[dict[str, Any]], timeout_s: float = 40.0) -> None:
    """Wait until every schedule has fired from now on (the owners, not the time, are
    what each stage is about)."""
    since_ms = int(time.time() * 1000)
    wait_until(lambda: fired_since(client, added, since_ms), timeout_s, 0.2)


def pause(client: Client, sid: str) -> None:
    def paused() -> bool:
        return client.call("schedule.pause", {"schedule_id": sid}) is not None

    wait_until(paused, 30.0, 0.1)


def outcome(client: Client, added: list[dict[str, Any]]) -> tuple[set[str], dict[str, str]] | None:
    """(the job ids of every due time settled so far, every schedule job and its state)."""
    rows = client.call("schedule.list", {})
    listed = client.call("job.list", {"limit": 5000})
    if rows is None or listed is None:
        return None
    consumed = {row["schedule_id"]: row["consumed_ms"] for row in rows["schedules"]}
    expected = set()
    for schedule in added:
        sid = schedule["schedule_id"]
        period_ms = int(schedule["trigger"]["cron"].split()[0][2:]) * 1000
        for due in range(schedule["next_due_ms"], consumed[sid] + 1, period_ms):
            expected.add(fire_job_id(sid, due))
    found = {j["job_id"]: j["state"] for j in listed["jobs"] if j["command"] == "stamp"}
    return expected, found


def shares_agree(client: Client, added: list[dict[str, Any]], prefix: str) -> bool:
    servers, rows = client.call("server.list", {}), client.call("schedule.list", {})
    if servers is None or rows is None:
        return False
    live = [s for s in servers["servers"] if s["role"] in ("leader", "standby")]
    owner = {t: f"{s['name']}:{s['incarnation']}" for s in live for t in s["partitions"]}
    shares = sum(len(s["partitions"]) for s in live)
    every = set(partition_topics(names(prefix).schedules, DEFAULT_PARTITIONS))
    return (
        len(owner) == shares  # no partition named twice
        and set(owner) == every
        and len(live) == 2
        and all(len(s["partitions"]) >= 2 for s in live)
        and all(r["owner"] == owner[r["partition"]] for r in rows["schedules"])
    )


def paused_and_settled(
    client: Client, added: list[dict[str, Any]], timeout_s: float
) -> tuple[set[str], dict[str, str]]:
    """Pause every schedule, then wait till every job has ended and the settled due
    times stop moving: (the due times' job ids, each job's state) as they are then.

    A pause reaches the partition's owner within a moment: a due time in between still
    fires."""
    for schedule in added:
        pause(client, schedule["schedule_id"])
    last: list[tuple[set[str], dict[str, str]]] = []

    def settled() -> bool:
        now = outcome(client, added)
        last[:] = [now] if now is not None else []
        if now is None:
            return False
        expected, found = now
        return set(found) == expected and all(s in TERMINAL for s in found.values())

    with contextlib.suppress(AssertionError):
        wait_until(settled, timeout_s, 0.5)
    assert last
    return last[0]


def stamps(root: Path, node: str) -> list[str]:
    path = root / f"stamps-{node}"
    return path.read_text().split() if path.exists() else []


def test_every_due_time_fires_once_as_partitions_move_between_servers(tmp_path: Path) -> None:
    sandbox = make_sandbox(tmp_path)
    try:
        scenario(sandbox)
    finally:
        sandbox.stop()


@pytest.mark.kafka
@pytest.mark.drill  # 15 s: bench/drills.py runs it (the suite: the same on SQLite above)
def test_the_same_on_a_kafka_broker(tmp_path: Path) -> None:
    """On a real broker (the session's, under a topic prefix of its own): the schedule
    partitions' group is Kafka's classic group protocol, with its own session bounds."""
    sandbox = make_sandbox(tmp_path, server_log(broker_or_skip()))
    try:
        scenario(sandbox)
    finally:
        sandbox.stop()


@pytest.mark.kafka
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
            scenario(sandbox)
        finally:
            sandbox.stop()
    finally:
        cluster.close()


def scenario(sandbox: Sandbox) -> None:
    """Two servers, 40 schedules; the leader killed -9, a third server joined: every due
    time one job, none twice on a node, and all three servers owned partitions."""
    sandbox.start_server()
    second = start_second_server(sandbox)
    assert "leader=no" in second.ready_line
    both = [api_of(second), sandbox.api]
    for name in sandbox.nodes:
        sandbox.write_agent_config(name, servers=both)
    sandbox.start_agents()
    client = Client(sandbox, both)
    try:
        wait_until(lambda: online(client, sandbox.nodes), 30.0, 0.1)
        added = []
        for i in range(SCHEDULES):
            params = {
                "command": "stamp",
                "nodes": [sandbox.nodes[i % len(sandbox.nodes)]],
                "cron": f"*/{2 + i % 2} * * * * *",
                "catch_up": "all",
                "overlap": "allow",
            }
            added.append(client.call("schedule.add", params)["schedule"])
        # Both servers fire their share before anything happens to them.
        wait_until(lambda: OWNED in second.log_text(), 20.0, 0.1)
        assert OWNED in sandbox.procs["server"].log_text()
        let_fire(client, added)  # fires of both owners
        sandbox.kill("server", signal.SIGKILL)  # the leader, mid-fire
        client.close()
        let_fire(client, added)  # server-b leads, takes server-a's partitions once stale
        third = start_third_server(sandbox)
        client.endpoints = [*both, ready_fields(third.ready_line)["api"]]
        wait_until(lambda: OWNED in third.log_text(), 30.0, 0.1)
        let_fire(client, added)  # fires of both owners again
        # Who fires what: the live servers' shares split every partition, and each
        # schedule names the server whose share holds its partition.
        # The servers' own topic prefix: a broker test runs under one of its own.
        log = tomllib.loads(sandbox.server_config_path.read_text()).get("log", {})
        prefix = log.get("topic_prefix", DEFAULT_PREFIX)
        wait_until(lambda: shares_agree(client, added, prefix), 20.0, 0.2)
        expected, found = paused_and_settled(client, added, 60.0)
        assert set(found) == expected  # every due time: one job, and no other job
        assert len(expected) >= SCHEDULES * 3  # each stage's fires, at least
        ran = [job for node in sandbox.nodes for job in stamps(sandbox.root, node)]
        assert len(ran) == len(set(ran)) and set(ran) <= expected  # none ran twice
        assert all(stamps(sandbox.root, node) for node in sandbox.nodes)
    finally:
        client.close()
