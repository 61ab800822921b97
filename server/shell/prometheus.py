"""The server's figures for Prometheus: ``server.info`` as metrics, on an HTTP endpoint.

Theory of operation. The server loop is single-threaded and owns all of its state; the
HTTP endpoint (``prometheus_client``'s server, a daemon thread) must not read that state
while the loop changes it. So the loop hands over a finished copy instead: about once a
second it builds ``server.info`` (a new dict, never changed after) and ``publish``
replaces the collector's reference to it, one atomic assignment. A scrape turns whatever
dict it finds into metric families (``families``, pure); it never touches the loop's
objects, and at worst sees figures a second old.

Names follow Prometheus conventions: a ``pushjobs_`` prefix, base units (seconds, not
milliseconds), ``_total`` on counters, labels for what varies (``state``, ``socket``,
``reason``, ``generation``). The latencies are histograms, so quantiles over any window
come from ``histogram_quantile``; ``pushjobs server status`` prints the same figures
since the server started.

The endpoint binds ``[server] metrics_bind`` (default ``127.0.0.1:9464``: local only,
opening it wider is a choice; ``""`` turns it off; port 0 takes any free port, and the
ready line names the one bound). A port already taken is logged and the server runs on
without metrics: monitoring must not stop the jobs.

Killed at any line: nothing here is durable; a restarted server counts from zero
(counters reset, which Prometheus's ``rate`` expects).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from pushjobs.errors import ConfigError

log = logging.getLogger("pushjobs.server")

DEFAULT_BIND = "127.0.0.1:9464"
PUBLISH_EVERY_S = 1.0
LAG_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
"""Heartbeat lag bucket bounds; the intake's last 1 ms bucket (>= 2 s) only counts in +Inf."""


def parse_bind(value: str) -> tuple[str, int] | None:
    """``host:port`` (``[::1]:9464`` for IPv6) as (host, port); None for ``""`` (off)."""
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f'expected host:port like {DEFAULT_BIND} (port 0: any free port), or "" to '
            f"turn the endpoint off; got {value!r}",
            key="server.metrics_bind",
        )
    return host, int(port)


# --- server.info as metric families (pure) ---------------------------------------------------


def families(info: Mapping[str, Any]) -> Iterator[Metric]:
    """Every metric of one ``server.info`` result."""
    server = InfoMetricFamily("pushjobs_server", "This server's name and incarnation.")
    server.add_metric([], {"server_id": str(info["server_id"]), "incarnation": info["incarnation"]})
    yield server
    yield gauge("pushjobs_leader", "1 while this server holds the leader lease.", info["leader"])
    if info.get("epoch") is not None:
        yield gauge("pushjobs_epoch", "The leader epoch this server writes with.", info["epoch"])
    yield gauge(
        "pushjobs_server_start_time_seconds",
        "When the server started, in seconds since the Unix epoch.",
        info["started_ms"] / 1000,
    )
    yield gauge("pushjobs_uptime_seconds", "Seconds since the server started.", info["uptime_s"])
    yield _labelled(
        GaugeMetricFamily("pushjobs_nodes", "Nodes by state.", labels=["state"]), info["nodes"]
    )
    yield _labelled(
        GaugeMetricFamily("pushjobs_jobs", "Jobs held in memory, by state.", labels=["state"]),
        info["jobs"],
    )
    drops = CounterMetricFamily(
        "pushjobs_drops", "Messages dropped, by socket and reason.", labels=["socket", "reason"]
    )
    for socket, reasons in sorted(info["drops"].items()):
        for reason, n in sorted(reasons.items()):
            drops.add_metric([socket, reason], n)
    yield drops
    yield _labelled(
        CounterMetricFamily(
            "pushjobs_late_replies", "Node replies no job could take.", labels=["reason"]
        ),
        info["late_replies"],
    )
    yield _labelled(
        CounterMetricFamily(
            "pushjobs_node_transitions", "Nodes going online or offline.", labels=["to"]
        ),
        info["transitions"],
    )
    yield heartbeat_lag(info["heartbeat_lag_ms"])
    yield gauge(
        "pushjobs_log_writable",
        "0 while the ordered log refuses writes (the server stands by), else 1.",
        info.get("log_outage") is None,
    )
    append = info.get("log_append")
    if append is not None:
        yield from _log_append(append)
    yield from _gc(info.get("gc") or {})
    yield from edges_of(info.get("edges") or [])
    yield from _scalars(info)


def edges_of(edges: list[Mapping[str, Any]]) -> Iterator[Metric]:
    """Per edge: serving, its nodes, lag, whether it is behind, how often it was lost."""
    if not edges:
        return
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        "live": GaugeMetricFamily(
            "pushjobs_edge_live", "1 while the edge serves.", labels=["edge"]
        ),
        "nodes": GaugeMetricFamily(
            "pushjobs_edge_nodes", "Nodes the edge tracks.", labels=["edge"]
        ),
        "online": GaugeMetricFamily(
            "pushjobs_edge_nodes_online", "Nodes online through the edge.", labels=["edge"]
        ),
        "backlog": GaugeMetricFamily(
            "pushjobs_edge_backlog",
            "1 while heartbeats wait unread at the edge (nobody is judged meanwhile).",
            labels=["edge"],
        ),
        "lag": GaugeMetricFamily(
            "pushjobs_edge_heartbeat_lag_p99_seconds",
            "99th percentile heartbeat lag at the edge since it started.",
            labels=["edge"],
        ),
        "losses": CounterMetricFamily(
            "pushjobs_edge_losses", "Times the edge was lost (exited or silent).", labels=["edge"]
        ),
    }
    for row in edges:
        name = [str(row["edge"])]
        families["live"].add_metric(name, float(bool(row.get("live"))))
        families["nodes"].add_metric(name, float(row.get("nodes", 0)))
        families["online"].add_metric(name, float(row.get("online", 0)))
        families["backlog"].add_metric(name, float(bool(row.get("backlog"))))
        families["lag"].add_metric(name, float(row.get("lag_p99_ms", 0)) / 1000)
        families["losses"].add_metric(name, float(row.get("losses", 0)))
    yield from families.values()


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=float(value))


def _labelled(
    family: GaugeMetricFamily | CounterMetricFamily, values: Mapping[str, float]
) -> Metric:
    for label, n in sorted(values.items()):
        family.add_metric([label], n)
    return family


def _le(bound_s: float) -> str:
    """A bucket's ``le`` label as Prometheus's own clients write it (``1.0``, ``0.005``)."""
    return str(float(bound_s))


def heartbeat_lag(sparse_ms: Mapping[str, int]) -> Metric:
    """The intake's 1 ms histogram, regrouped into a few cumulative buckets."""
    lags = sorted((int(ms), n) for ms, n in sparse_ms.items())
    buckets = [
        (_le(bound / 1000), sum(n for ms, n in lags if ms <= bound)) for bound in LAG_BOUNDS_MS
    ]
    count = sum(n for _, n in lags)
    family = HistogramMetricFamily(
        "pushjobs_heartbeat_lag_seconds",
        "From a node heartbeat's timestamp to this server reading it (1 ms resolution).",
    )
    family.add_metric([], [*buckets, ("+Inf", count)], sum(ms * n for ms, n in lags) / 1000)
    return family


def _log_append(append: Mapping[str, Any]) -> Iterator[Metric]:
    family = HistogramMetricFamily(
        "pushjobs_log_append_seconds", "Durable appends to the ordered log (one per batch)."
    )
    buckets = [(_le(bound), n) for bound, n in append["buckets"]]
    family.add_metric([], [*buckets, ("+Inf", append["count"])], append["sum_s"])
    yield family
    yield _counter(
        "pushjobs_log_append_failures",
        "Appends the ordered log refused (disk full, read-only, unreachable).",
        append["failures"],
    )


def _gc(gc: Mapping[str, Any]) -> Iterator[Metric]:
    if not gc:
        return
    collections = CounterMetricFamily(
        "pushjobs_gc_collections", "Garbage collections, by generation.", labels=["generation"]
    )
    paused = CounterMetricFamily(
        "pushjobs_gc_pause_seconds",
        "Time the loop stood still in garbage collections, by generation.",
        labels=["generation"],
    )
    longest = GaugeMetricFamily(
        "pushjobs_gc_pause_max_seconds",
        "The longest garbage collection pause, by generation.",
        labels=["generation"],
    )
    for gen, n in enumerate(gc["collections"]):
        collections.add_metric([str(gen)], n)
        paused.add_metric([str(gen)], gc["pause_total_ms"][gen] / 1000)
        longest.add_metric([str(gen)], gc["pause_max_ms"][gen] / 1000)
    yield from (collections, paused, longest)
    yield gauge(
        "pushjobs_gc_frozen_objects",
        "Objects moved out of the collector's reach after a full collection.",
        gc["frozen_objects"],
    )


def _scalars(info: Mapping[str, Any]) -> Iterator[Metric]:
    enrolment, watches = info["enrolment"], info["watches"]
    yield gauge(
        "pushjobs_command_sockets", "Open command sockets to nodes.", info["command_sockets"]
    )
    yield _counter(
        "pushjobs_expiry_deferred",
        "Offline checks put off because heartbeats were still queued.",
        info["expiry_deferred"],
    )
    yield gauge(
        "pushjobs_backlog",
        "1 while messages from nodes wait to be read (the server is behind), else 0.",
        int(bool(info.get("backlog"))),
    )
    yield _counter(
        "pushjobs_stalls",
        "Times the server could not read for longer than a heartbeat interval.",
        info.get("stalls", 0),
    )
    yield gauge("pushjobs_watches_parked", "job.watch requests waiting.", watches["parked"])
    yield _counter("pushjobs_watches_refused", "job.watch requests over a cap.", watches["refused"])
    yield gauge(
        "pushjobs_enrolment_queued", "Unknown keys waiting to be written.", enrolment["queued"]
    )
    yield _counter("pushjobs_enrolment_refused", "Config requests refused.", enrolment["refused"])
    yield _counter(
        "pushjobs_registry_writes", "Writes of the key registry.", enrolment["registry_writes"]
    )
    yield _counter(
        "pushjobs_registry_write_failures",
        "Registry writes that failed (their batch was lost).",
        enrolment["failed_writes"],
    )


# --- the endpoint ----------------------------------------------------------------------------


class Snapshot:
    """A collector serving the last published ``server.info``; nothing until the first."""

    def __init__(self) -> None:
        self.info: Mapping[str, Any] | None = None

    def collect(self) -> Iterator[Metric]:
        info = self.info  # one read: a publish in between changes nothing for this scrape
        if info is not None:
            yield from families(info)


class MetricsEndpoint:
    """The HTTP endpoint and the snapshot it serves; ``publish`` is the loop's only call."""

    def __init__(self, bind: str) -> None:
        self.address = parse_bind(bind)
        self.snapshot = Snapshot()
        self.url: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> str | None:
        """Listen; the URL scraped, or None when off or when the port cannot be bound."""
        if self.address is None:
            return None
        host, port = self.address
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.snapshot)
        ProcessCollector(registry=registry)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            log.error("metrics endpoint %s:%d not started: %s", host, port, exc.strerror or exc)
            return None
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self._server.server_port}/metrics"
        log.info("metrics at %s", self.url)
        return self.url

    def publish(self, info: Mapping[str, Any]) -> None:
        """Serve ``info`` from now on; the caller never changes it afterwards."""
        self.snapshot.info = info

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
