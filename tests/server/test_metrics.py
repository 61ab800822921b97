"""``server.info`` as Prometheus metrics: names, types and values, served over real HTTP."""

from __future__ import annotations

import copy
import logging
import random
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pushjobs.errors import ConfigError
from server.front.backend import lag_summary
from server.shell.prometheus import MetricsEndpoint, Snapshot, parse_bind

INFO: dict[str, Any] = {
    "server_id": "server",
    "incarnation": "0123abcd",
    "leader": True,
    "epoch": 4,
    "started_ms": 1_700_000_000_000,
    "uptime_s": 12.5,
    "nodes_known": 5,
    "nodes_online": 3,
    "nodes": {"online": 3, "offline": 2, "pending": 1},
    "jobs": {"running": 1, "complete": 7, "aborted": 0},
    "jobs_active": 1,
    "late_replies": {"unknown_job": 2},
    "drops": {"reply": {"bad_signature": 3, "replay": 1}, "api": {"frame": 5}},
    "heartbeats": 6,
    "heartbeat_lag_ms": {"0": 2, "3": 2, "40": 1, "2000": 1},
    "heartbeat_lag": {"p50_ms": 3, "p99_ms": 2000, "max_ms": 2000},
    "transitions": {"online": 4, "offline": 1},
    "command_sockets": 3,
    "expiry_deferred": 2,
    "backlog": True,
    "stalls": 1,
    "watches": {"parked": 1, "refused": 0},
    "enrolment": {"queued": 0, "refused": 2, "registry_writes": 3, "failed_writes": 1},
    "gc": {
        "collections": [10, 2, 1],
        "pause_total_ms": [5.0, 2.0, 40.0],
        "pause_max_ms": [1.0, 1.5, 40.0],
        "frozen_objects": 1234,
    },
    "log_append": {
        "count": 4,
        "sum_s": 0.01,
        "p50_ms": 2.0,
        "p99_ms": 5.0,
        "max_ms": 4.5,
        "buckets": [[0.001, 1], [0.002, 3], [0.005, 4]],
        "failures": 2,
    },
}


def scrape_text(text: str) -> dict[str, Any]:
    """Families by name, parsed by prometheus_client's own parser."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def exposition(info: dict[str, Any]) -> dict[str, Any]:
    snapshot = Snapshot()
    snapshot.info = info
    registry = CollectorRegistry(auto_describe=False)
    registry.register(snapshot)
    return scrape_text(generate_latest(registry).decode())


def value(family: Any, sample: str, **labels: str) -> float:
    found = [s.value for s in family.samples if s.name == sample and s.labels == labels]
    assert len(found) == 1, (sample, labels, family.samples)
    return float(found[0])


def test_every_figure_of_server_info_is_a_metric() -> None:
    m = exposition(INFO)
    assert (
        value(
            m["pushjobs_server_info"],
            "pushjobs_server_info",
            server_id="server",
            incarnation="0123abcd",
        )
        == 1
    )
    assert value(m["pushjobs_leader"], "pushjobs_leader") == 1
    assert value(m["pushjobs_epoch"], "pushjobs_epoch") == 4
    assert value(m["pushjobs_uptime_seconds"], "pushjobs_uptime_seconds") == 12.5
    start = m["pushjobs_server_start_time_seconds"]
    assert value(start, "pushjobs_server_start_time_seconds") == 1_700_000_000
    nodes = m["pushjobs_nodes"]
    assert [value(nodes, "pushjobs_nodes", state=s) for s in ("online", "offline", "pending")] == [
        3,
        2,
        1,
    ]
    assert value(m["pushjobs_jobs"], "pushjobs_jobs", state="complete") == 7
    drops = m["pushjobs_drops"]
    assert drops.type == "counter"
    assert value(drops, "pushjobs_drops_total", socket="reply", reason="bad_signature") == 3
    assert value(drops, "pushjobs_drops_total", socket="api", reason="frame") == 5
    late = m["pushjobs_late_replies"]
    assert value(late, "pushjobs_late_replies_total", reason="unknown_job") == 2
    gc = m["pushjobs_gc_pause_seconds"]
    assert value(gc, "pushjobs_gc_pause_seconds_total", generation="2") == 0.04
    longest = m["pushjobs_gc_pause_max_seconds"]
    assert value(longest, "pushjobs_gc_pause_max_seconds", generation="1") == 0.0015
    failures = m["pushjobs_log_append_failures"]
    assert value(failures, "pushjobs_log_append_failures_total") == 2
    writes = m["pushjobs_registry_write_failures"]
    assert value(writes, "pushjobs_registry_write_failures_total") == 1
    # Overload: behind now, how often offline checks waited, how often it stalled.
    assert value(m["pushjobs_backlog"], "pushjobs_backlog") == 1
    assert value(m["pushjobs_expiry_deferred"], "pushjobs_expiry_deferred_total") == 2
    assert value(m["pushjobs_stalls"], "pushjobs_stalls_total") == 1


def test_heartbeat_lag_is_a_histogram_in_seconds() -> None:
    lag = exposition(INFO)["pushjobs_heartbeat_lag_seconds"]
    assert lag.type == "histogram"
    name = "pushjobs_heartbeat_lag_seconds_bucket"
    assert value(lag, name, le="0.001") == 2
    assert value(lag, name, le="0.005") == 4
    assert value(lag, name, le="0.05") == 5
    assert value(lag, name, le="1.0") == 5  # 2000 ms means ">= 2 s": only in +Inf
    assert value(lag, name, le="+Inf") == 6
    assert value(lag, "pushjobs_heartbeat_lag_seconds_count") == 6
    assert value(lag, "pushjobs_heartbeat_lag_seconds_sum") == pytest.approx(2.046)


def test_log_append_latency_is_a_histogram_in_seconds() -> None:
    append = exposition(INFO)["pushjobs_log_append_seconds"]
    assert append.type == "histogram"
    assert value(append, "pushjobs_log_append_seconds_bucket", le="0.002") == 3
    assert value(append, "pushjobs_log_append_seconds_bucket", le="+Inf") == 4
    assert value(append, "pushjobs_log_append_seconds_sum") == 0.01


def test_names_follow_prometheus_conventions() -> None:
    families = exposition(INFO)
    for name, family in families.items():
        assert name.startswith("pushjobs_")
        assert not name.endswith(("_ms", "_milliseconds")), name  # base units only
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name == f"{name}_total"
        if family.type == "histogram":
            assert name.endswith("_seconds")


def test_a_standby_server_has_no_epoch_and_a_server_without_timing_no_histogram() -> None:
    info = {**INFO, "leader": False, "epoch": None, "log_append": None, "gc": {}}
    families = exposition(info)
    assert value(families["pushjobs_leader"], "pushjobs_leader") == 0
    assert "pushjobs_epoch" not in families
    assert "pushjobs_log_append_seconds" not in families
    assert "pushjobs_gc_collections" not in families


def test_nothing_is_served_before_the_first_publish() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshot())
    assert generate_latest(registry) == b""


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return str(response.read().decode())


def test_the_endpoint_serves_each_published_snapshot_over_http() -> None:
    endpoint = MetricsEndpoint("127.0.0.1:0")
    url = endpoint.start()
    try:
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        assert "pushjobs_leader" not in fetch(url)  # up, but nothing published yet
        endpoint.publish(INFO)
        families = scrape_text(fetch(url))
        assert value(families["pushjobs_epoch"], "pushjobs_epoch") == 4
        assert "process_resident_memory_bytes" in families  # the process's own figures
        later = copy.deepcopy(INFO)
        later["epoch"] = 5
        endpoint.publish(later)
        assert value(scrape_text(fetch(url))["pushjobs_epoch"], "pushjobs_epoch") == 5
    finally:
        endpoint.close()
    with pytest.raises(urllib.error.URLError):
        fetch(url)


def test_a_port_in_use_is_logged_and_the_server_runs_without_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        endpoint = MetricsEndpoint(f"127.0.0.1:{port}")
        with caplog.at_level(logging.ERROR, logger="pushjobs.server"):
            assert endpoint.start() is None
        endpoint.close()
    assert f"metrics endpoint 127.0.0.1:{port} not started" in caplog.text


def test_an_empty_bind_turns_the_endpoint_off() -> None:
    endpoint = MetricsEndpoint("")
    assert endpoint.start() is None
    endpoint.close()


@pytest.mark.parametrize(
    ("bind", "parsed"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("[::1]:9464", ("::1", 9464)),
        ("", None),
    ],
)
def test_binds_that_parse(bind: str, parsed: tuple[str, int] | None) -> None:
    assert parse_bind(bind) == parsed


@pytest.mark.parametrize("bind", ["9464", ":9464", "localhost", "host:port", "h:70000"])
def test_binds_that_are_refused_name_the_setting(bind: str) -> None:
    with pytest.raises(ConfigError, match=r"server\.metrics_bind: expected host:port"):
        parse_bind(bind)


def test_lag_percentiles_from_the_intake_histogram() -> None:
    histogram = [0] * 2001
    assert lag_summary(histogram) == {"p50_ms": None, "p99_ms": None, "max_ms": None}
    histogram[2] = 60
    histogram[7] = 39
    histogram[900] = 1
    assert lag_summary(histogram) == {"p50_ms": 2, "p99_ms": 7, "max_ms": 900}


def _lag_summary_by_walking(histogram: list[int]) -> dict[str, int | None]:
    """The definition: the first bucket holding a heartbeat whose running total reaches
    the rank; the max, the last bucket holding one."""
    total = sum(histogram)
    if not total:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    found: dict[str, int | None] = {}
    seen = 0
    for ms, n in enumerate(histogram):
        seen += n
        for name, rank in (("p50_ms", 0.5 * total), ("p99_ms", 0.99 * total)):
            if name not in found and n and seen >= rank:
                found[name] = ms
    found["max_ms"] = max(ms for ms, n in enumerate(histogram) if n)
    return found


@pytest.mark.parametrize("seed", range(50))
def test_lag_percentiles_match_their_definition(seed: int) -> None:
    rng = random.Random(seed)
    histogram = [0] * 2001
    for _ in range(rng.choice([1, 2, 3, 10, 100, 1000])):
        histogram[rng.choice([0, 1, 2, 5, rng.randrange(2001), 2000])] += rng.randrange(1, 4)
    assert lag_summary(histogram) == _lag_summary_by_walking(histogram)
