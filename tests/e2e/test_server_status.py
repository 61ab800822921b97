"""The server's health through the real CLI (``pushjobs server status``) and its
Prometheus endpoint, scraped over HTTP and parsed by ``prometheus_client``'s parser."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from keys.identity import generate
from keys.registry import KeyRegistry
from pushjobs.cli.exitcodes import Exit
from pushjobs.testbed.sandbox import ready_fields
from pushjobs.transport.sockets import CurveKeys, Transport
from tests.e2e.conftest import Fleet, impatient_client_config, make_fleet
from tests.support import wait_until

GARBAGE = 25


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(
        tmp_path_factory.mktemp("status"),
        nodes=["node-1", "node-2"],
        server_extra={"server": {"metrics_bind": "127.0.0.1:0"}},
    )
    try:
        fleet.wait_online()
        job = fleet.start("hello")
        fleet.wait_job(job["job_id"])
        _send_garbage(fleet)
        yield fleet
    finally:
        fleet.close()


def _send_garbage(fleet: Fleet) -> None:
    """Frames from an unknown key on the API socket: counted drops, by reason."""
    before = sum(fleet.call("server.info")["drops"].get("api", {}).values())
    stranger = generate("stranger", "user")
    with Transport() as transport:
        api = transport.socket(
            "dealer",
            connect=fleet.sandbox.api,
            curve_client=CurveKeys(stranger.public.curve_public, stranger.curve_secret),
            server_public=fleet.sandbox.identities["server"].public.curve_public,
        )
        for _ in range(GARBAGE):
            api.send_multipart([b"not", b"a", b"message"])
        wait_until(
            lambda: (
                sum(fleet.call("server.info")["drops"].get("api", {}).values()) >= before + GARBAGE
            )
        )


def pushjobs(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pushjobs.cli.app", *args],
        env=fleet.sandbox.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def scrape(fleet: Fleet) -> dict[str, Any]:
    url = ready_fields(fleet.sandbox.procs["server"].ready_line)["metrics"]
    assert url.startswith("http://127.0.0.1:")  # the default: bound to loopback only
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict[str, Any], name: str, **labels: str) -> float:
    found = [
        s.value
        for family in families.values()
        for s in family.samples
        if s.name == name and s.labels == labels
    ]
    assert len(found) == 1, (name, labels)
    return float(found[0])


def test_server_status_shows_health_at_a_glance(fleet: Fleet) -> None:
    done = pushjobs(fleet, "server", "status")
    assert done.returncode == Exit.OK, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert "leader, epoch 1, up " in lines["server"]
    assert "2 online, 0 offline, 0 pending" in lines["nodes"]
    assert "1 complete" in lines["jobs"]
    assert "api: " in lines["drops"]  # the stranger's frames, by reason
    assert "lag p50 " in lines["heartbeats"] and " ms" in lines["heartbeats"]
    assert "append p50 " in lines["log"] and "0 failed" in lines["log"]
    assert "paused " in lines["gc"]
    assert done.stderr == ""


def test_server_status_json_has_every_figure(fleet: Fleet) -> None:
    done = pushjobs(fleet, "server", "status", "--json")
    assert done.returncode == Exit.OK, done.stderr
    info = json.loads(done.stdout)
    assert info["leader"] is True and info["epoch"] == 1
    assert info["uptime_s"] > 0
    assert info["nodes"] == {"online": 2, "offline": 0, "pending": 0}
    assert info["jobs"]["complete"] == 1 and info["jobs"]["running"] == 0
    assert sum(info["drops"]["api"].values()) >= GARBAGE
    lag = info["heartbeat_lag"]
    assert 0 <= lag["p50_ms"] <= lag["p99_ms"] <= lag["max_ms"]
    append = info["log_append"]
    assert append["count"] > 0 and append["failures"] == 0
    assert 0 < append["p50_ms"] <= append["p99_ms"]
    assert len(info["gc"]["collections"]) == 3


def test_prometheus_endpoint_serves_the_same_figures(fleet: Fleet) -> None:
    info = fleet.call("server.info")

    def published() -> dict[str, Any] | None:
        """A snapshot newer than ``info`` (the loop publishes one about once a second)."""
        families = scrape(fleet)
        beats = sample(families, "pushjobs_heartbeat_lag_seconds_count")
        return families if beats >= info["heartbeats"] else None

    families = wait_until(published, 10, 0.2)
    assert families is not None
    assert sample(families, "pushjobs_leader") == 1
    assert sample(families, "pushjobs_epoch") == info["epoch"]
    assert sample(families, "pushjobs_nodes", state="online") == 2
    assert sample(families, "pushjobs_nodes", state="pending") == 0
    assert sample(families, "pushjobs_jobs", state="complete") == 1
    for reason, n in info["drops"]["api"].items():
        assert sample(families, "pushjobs_drops_total", socket="api", reason=reason) >= n
    assert sample(families, "pushjobs_log_append_seconds_count") >= info["log_append"]["count"]
    assert sample(families, "pushjobs_log_append_failures_total") == 0
    assert families["pushjobs_gc_pause_seconds"].type == "counter"
    assert sample(families, "pushjobs_uptime_seconds") > 0
    assert "process_resident_memory_bytes" in families


STATUS_OF_NO_SERVER = ("server", "status", "--server", "tcp://127.0.0.1:9", "--json")


def test_server_status_against_no_server_is_one_line_and_exit_6(
    fleet: Fleet, tmp_path: Path
) -> None:
    config = impatient_client_config(fleet, tmp_path / "client.toml")
    done = subprocess.run(
        [sys.executable, "-m", "pushjobs.cli.app", *STATUS_OF_NO_SERVER],
        env={**fleet.sandbox.env(), "PUSHJOBS_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == Exit.UNREACHABLE
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1


def test_offline_and_pending_nodes_are_counted_in_status_and_metrics(tmp_path: Path) -> None:
    fleet = make_fleet(
        tmp_path,
        nodes=["node-1", "node-2"],
        server_extra={"server": {"metrics_bind": "127.0.0.1:0"}},
    )
    try:
        fleet.wait_online()
        KeyRegistry(fleet.sandbox.registry_path).add(generate("node-9", "node").public)
        fleet.sandbox.kill("node-2")
        fleet.wait_offline("node-2")
        expected = {"online": 1, "offline": 1, "pending": 1}
        wait_until(lambda: fleet.call("server.info")["nodes"] == expected)
        done = pushjobs(fleet, "server", "status")
        assert "1 online, 1 offline, 1 pending" in done.stdout, done.stderr

        def counted() -> bool:
            families = scrape(fleet)
            got = {s: sample(families, "pushjobs_nodes", state=s) for s in expected}
            return got == expected

        wait_until(counted, 10, 0.2)
    finally:
        fleet.close()
