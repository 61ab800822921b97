"""An edge of its own's load as Prometheus metrics, and its ``[edge] metrics_bind``."""

from __future__ import annotations

import dataclasses
import urllib.error
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from pushjobs.config import load_config
from pushjobs.errors import ConfigError
from server.edge.edgeconfig import EdgeConfig, EdgeSection
from server.edge.edgemetrics import EdgeMetrics, families, with_leader
from server.shell.membership import LEADER, Member
from server.shell.prometheus import DEFAULT_BIND, edges_of, heartbeat_lag
from tests.server.test_metrics import fetch as fetch_text
from tests.server.test_metrics import value

# As ``Edge._load`` builds it (its hello's fields, then the figures).
LOAD: dict[str, Any] = {
    "edge": "edge-b",
    "incarnation": "5e1f00aa",
    "endpoints": {"heartbeat": "tcp://10.0.0.12:7720", "reply": "tcp://10.0.0.12:7721"},
    "pid": 4242,
    "remote": True,
    "capacity": 2.0,
    "nodes": 120,
    "online": 117,
    "counters": {
        "heartbeats": 6,
        "replies": 9,
        "stalls": 1,
        "expiry_deferred": 5,
        "expiry_deferred_leader_quiet": 7,
        "run_sent": 30,
        "unsendable": 2,
        "reports_dropped": 4,
        "fenced": 2,
        "novel_event": 3,  # one the edge counts and the table does not name yet
    },
    "drops": {"bad_signature": 3, "replay": 1},
    "backlog": True,
    "lag_p99_ms": 7,
    "heartbeats": 6,
    "heartbeat_lag_ms": {"0": 2, "3": 2, "40": 1, "2000": 1},
    "command_sockets": 11,
    "command_drops": 8,
    "fenced": True,
}
LEADER_RECORD = Member(
    name="server",
    incarnation="0123abcd",
    role=LEADER,
    epoch=4,
    api="tcp://10.0.0.5:7700",
    heartbeat="tcp://10.0.0.5:7701",
    reply="tcp://10.0.0.5:7702",
    ts=1_700_000_000_000,
)


class Fixed:
    """A collector of one load's families."""

    def __init__(self, load: Mapping[str, Any]) -> None:
        self.load = load

    def collect(self) -> Iterator[Metric]:
        return families(self.load)


def scrape_text(text: str) -> dict[str, Any]:
    """Families by name, parsed by prometheus_client's own parser."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def exposition(load: Mapping[str, Any]) -> dict[str, Any]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(load))
    return scrape_text(generate_latest(registry).decode())


def test_an_edge_waiting_for_a_leader_says_so_and_nothing_else() -> None:
    m = exposition({})
    assert list(m) == ["pushjobs_edge_serving"]
    assert value(m["pushjobs_edge_serving"], "pushjobs_edge_serving") == 0


def test_an_edge_that_joined_names_its_leader_before_its_first_load() -> None:
    m = exposition(with_leader({}, LEADER_RECORD))
    assert value(m["pushjobs_edge_serving"], "pushjobs_edge_serving") == 1
    leader = m["pushjobs_edge_leader_info"]
    sample = "pushjobs_edge_leader_info"
    assert value(leader, sample, leader="server", incarnation="0123abcd") == 1
    assert value(m["pushjobs_edge_leader_epoch"], "pushjobs_edge_leader_epoch") == 4
    assert "pushjobs_edge_nodes" not in m  # its loop has not reported yet


def test_a_leader_without_an_epoch_has_no_epoch_metric() -> None:
    m = exposition(with_leader(LOAD, dataclasses.replace(LEADER_RECORD, epoch=None)))
    assert value(m["pushjobs_edge_serving"], "pushjobs_edge_serving") == 1
    assert "pushjobs_edge_leader_epoch" not in m


def test_every_figure_of_the_load_is_a_metric() -> None:
    m = exposition(with_leader(LOAD, LEADER_RECORD))
    edge = m["pushjobs_edge_info"]
    assert value(edge, "pushjobs_edge_info", edge="edge-b", incarnation="5e1f00aa") == 1
    assert value(m["pushjobs_edge_capacity"], "pushjobs_edge_capacity") == 2.0
    assert value(m["pushjobs_edge_nodes"], "pushjobs_edge_nodes") == 120
    assert value(m["pushjobs_edge_nodes_online"], "pushjobs_edge_nodes_online") == 117
    assert value(m["pushjobs_edge_backlog"], "pushjobs_edge_backlog") == 1
    p99 = m["pushjobs_edge_heartbeat_lag_p99_seconds"]
    assert value(p99, "pushjobs_edge_heartbeat_lag_p99_seconds") == 0.007
    assert value(m["pushjobs_edge_command_sockets"], "pushjobs_edge_command_sockets") == 11
    drops = m["pushjobs_edge_drops"]
    assert drops.type == "counter"
    total = "pushjobs_edge_drops_total"
    assert value(drops, total, socket="reply", reason="bad_signature") == 3
    assert value(drops, total, socket="reply", reason="replay") == 1
    assert value(drops, total, socket="command", reason="queue_full") == 8
    assert value(drops, total, socket="command", reason="unsendable") == 2
    assert value(drops, total, socket="leader", reason="queue_full") == 4
    deferred = m["pushjobs_edge_expiry_deferred"]
    assert value(deferred, "pushjobs_edge_expiry_deferred_total", reason="backlog") == 5
    assert value(deferred, "pushjobs_edge_expiry_deferred_total", reason="leader_quiet") == 7
    sent = m["pushjobs_edge_commands_sent"]
    assert value(sent, "pushjobs_edge_commands_sent_total", kind="run") == 30
    assert value(m["pushjobs_edge_stalls"], "pushjobs_edge_stalls_total") == 1
    assert value(m["pushjobs_edge_replies"], "pushjobs_edge_replies_total") == 9
    # Cut off from its leader's grants: its job commands wait.
    assert value(m["pushjobs_edge_fenced"], "pushjobs_edge_fenced") == 1
    assert value(m["pushjobs_edge_fences"], "pushjobs_edge_fences_total") == 2
    # A counter the table misses is still served; heartbeats are the histogram's count.
    events = m["pushjobs_edge_events"]
    assert [s.labels["event"] for s in events.samples] == ["novel_event"]
    assert value(events, "pushjobs_edge_events_total", event="novel_event") == 3


def test_counters_not_counted_yet_are_served_at_zero() -> None:
    m = exposition({**LOAD, "counters": {}, "drops": {}, "command_drops": 0})
    assert value(m["pushjobs_edge_stalls"], "pushjobs_edge_stalls_total") == 0
    sent = m["pushjobs_edge_commands_sent"]
    assert value(sent, "pushjobs_edge_commands_sent_total", kind="abort") == 0
    drops = m["pushjobs_edge_drops"]
    assert value(drops, "pushjobs_edge_drops_total", socket="leader", reason="queue_full") == 0
    assert not [s for s in drops.samples if s.labels.get("socket") == "reply"]
    assert "pushjobs_edge_events" not in m


def test_heartbeat_lag_is_the_servers_histogram_in_seconds() -> None:
    lag = exposition(LOAD)["pushjobs_edge_heartbeat_lag_seconds"]
    assert lag.type == "histogram"
    name = "pushjobs_edge_heartbeat_lag_seconds_bucket"
    assert value(lag, name, le="0.001") == 2
    assert value(lag, name, le="0.005") == 4
    assert value(lag, name, le="0.05") == 5
    assert value(lag, name, le="1.0") == 5  # 2000 ms means ">= 2 s": only in +Inf
    assert value(lag, name, le="+Inf") == 6
    assert value(lag, "pushjobs_edge_heartbeat_lag_seconds_count") == LOAD["heartbeats"]
    assert value(lag, "pushjobs_edge_heartbeat_lag_seconds_sum") == pytest.approx(2.046)
    # The server's buckets, so one dashboard reads both.
    server = heartbeat_lag(LOAD["heartbeat_lag_ms"])
    ours = [(s.labels, s.value) for s in lag.samples if s.name == name]
    theirs = [(s.labels, s.value) for s in server.samples if s.name.endswith("_bucket")]
    assert ours == theirs


def test_no_heartbeats_yet_is_an_empty_histogram() -> None:
    lag = exposition({**LOAD, "heartbeat_lag_ms": {}})["pushjobs_edge_heartbeat_lag_seconds"]
    assert value(lag, "pushjobs_edge_heartbeat_lag_seconds_bucket", le="+Inf") == 0
    assert value(lag, "pushjobs_edge_heartbeat_lag_seconds_sum") == 0


def test_names_follow_prometheus_conventions() -> None:
    found = exposition(with_leader(LOAD, LEADER_RECORD))
    for name, family in found.items():
        assert name.startswith("pushjobs_edge"), name
        assert not name.endswith(("_ms", "_milliseconds")), name  # base units only
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name == f"{name}_total"
        if family.type == "histogram":
            assert name.endswith("_seconds")


def test_figures_the_leader_also_shows_per_edge_are_the_same_metrics() -> None:
    # A dashboard of the leader's per-edge figures reads the edge's own the same way.
    row = {"edge": "edge-b", "live": True, "nodes": 1, "online": 1, "backlog": False}
    leaders = {f.name: f for f in edges_of([{**row, "lag_p99_ms": 3, "losses": 0}])}
    ours = {f.name: f for f in families(LOAD)}
    shared = ["nodes", "nodes_online", "backlog", "heartbeat_lag_p99_seconds"]
    for name in (f"pushjobs_edge_{suffix}" for suffix in shared):
        assert (ours[name].type, ours[name].documentation) == (
            leaders[name].type,
            leaders[name].documentation,
        ), name


# --- the endpoint ----------------------------------------------------------------------------


class StubEdge:
    """What the endpoint reads of an edge: the load its loop last replaced."""

    def __init__(self, load: dict[str, Any]) -> None:
        self.last_load = load


def fetch(url: str) -> dict[str, Any]:
    return scrape_text(fetch_text(url))


def test_the_endpoint_serves_whichever_edge_runs_read_at_each_scrape() -> None:
    endpoint = EdgeMetrics("127.0.0.1:0")
    url = endpoint.start()
    try:
        assert url is not None and url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        waiting = fetch(url)
        assert value(waiting["pushjobs_edge_serving"], "pushjobs_edge_serving") == 0
        assert "process_resident_memory_bytes" in waiting  # the process's own figures
        edge = StubEdge(LOAD)
        endpoint.follow((edge, LEADER_RECORD))
        serving = fetch(url)
        assert value(serving["pushjobs_edge_serving"], "pushjobs_edge_serving") == 1
        assert value(serving["pushjobs_edge_nodes"], "pushjobs_edge_nodes") == 120
        edge.last_load = {**LOAD, "nodes": 121}  # the loop's next report: a new dict
        assert value(fetch(url)["pushjobs_edge_nodes"], "pushjobs_edge_nodes") == 121
        endpoint.follow(None)  # the leader fell silent: looking for the next
        again = fetch(url)
        assert value(again["pushjobs_edge_serving"], "pushjobs_edge_serving") == 0
        assert "pushjobs_edge_nodes" not in again
    finally:
        endpoint.close()
    with pytest.raises(urllib.error.URLError):
        fetch(url)


# --- [edge] metrics_bind -----------------------------------------------------------------------


def test_the_default_bind_is_local_and_beside_a_servers() -> None:
    section = EdgeSection(name="edge-b")
    assert section.metrics_bind == "127.0.0.1:9466"
    assert section.metrics_bind != DEFAULT_BIND
    assert list(section.check()) == []


@pytest.mark.parametrize("bind", ["", "127.0.0.1:0", "0.0.0.0:9466", "[::1]:9466"])
def test_binds_that_are_accepted(bind: str) -> None:
    assert list(EdgeSection(name="edge-b", metrics_bind=bind).check()) == []


@pytest.mark.parametrize("bind", ["9466", ":9466", "localhost", "host:port", "h:70000"])
def test_binds_that_are_refused(bind: str) -> None:
    problems = dict(EdgeSection(name="edge-b", metrics_bind=bind).check())
    assert list(problems) == ["metrics_bind"]
    assert problems["metrics_bind"].startswith("expected host:port")


def test_a_bad_bind_in_edge_toml_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "edge.toml"
    path.write_text('[edge]\nname = "edge-b"\nmetrics_bind = "9466"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(EdgeConfig, path, env={})
    assert raised.value.key == "edge.metrics_bind"
    assert "expected host:port" in str(raised.value)
    path.write_text('[edge]\nname = "edge-b"\nmetrics_bind = ""\n')
    assert load_config(EdgeConfig, path, env={}).edge.metrics_bind == ""
