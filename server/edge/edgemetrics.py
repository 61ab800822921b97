"""An edge of its own's figures for Prometheus: its load, and whom it serves.

Theory of operation. ``pushjobs-edge`` follows one leader after another, a new ``Edge``
for each, and serves its metrics from one endpoint that outlives them all: the server's
own (``server.shell.prometheus.MetricsEndpoint``, a ``prometheus_client`` HTTP thread),
given this module's collector in place of the server's snapshot. ``serve`` tells the
collector which edge serves which leader (``follow``), one atomic assignment of a pair,
and ``None`` while it looks for a leader.

Nothing publishes on a timer: the edge's loop already hands over a finished dict, its
``last_load``, replaced (never changed) every half heartbeat interval when it reports to
the leader. A scrape reads that reference, adds the leader it serves, and turns the
result into metric families (``families``, pure). It never touches the loop's objects,
and its figures are as fresh as the edge's own report to the leader; a thread or timer
of ours copying them would only make them staler.

Names follow the server's (``server.shell.prometheus``) with a ``pushjobs_edge_`` prefix:
base units, ``_total`` on counters, labels for what varies. The figures the leader also
shows per edge (``pushjobs_edge_nodes``, ``..._nodes_online``, ``..._backlog``,
``..._heartbeat_lag_p99_seconds``) have its names, types and help; here the target is
the edge, so they carry no ``edge`` label (``pushjobs_edge_info`` names it). The heartbeat
lag histogram has the server's buckets, drops the server's ``socket`` and ``reason``.

The endpoint binds ``[edge] metrics_bind`` (default ``127.0.0.1:9466``, beside a server's
9464; ``""`` off; port 0 any free port). A port already taken is logged and the edge
serves on without metrics: monitoring must not stop the fleet.

Killed at any line: nothing here is durable. Each edge counts from zero, so a new leader,
like a restart, resets the counters (``rate`` expects that; ``pushjobs_edge_info``'s
incarnation changes with it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from server.shell.membership import Member
from server.shell.prometheus import MetricsEndpoint, Snapshot, gauge, heartbeat_lag

# The edge's counters (its loop's and its intake's, merged in the load's ``counters``):
# the family each is served in, and its label values. ``heartbeats`` is the lag
# histogram's ``_count``. One the edge adds later and this table misses is still served,
# as ``pushjobs_edge_events_total{event}``.
COUNTER_FAMILY: dict[str, tuple[str, tuple[str, ...]]] = {
    "replies": ("pushjobs_edge_replies", ()),
    "heartbeats_shed": ("pushjobs_edge_heartbeats_shed", ()),
    "stalls": ("pushjobs_edge_stalls", ()),
    "leader_quiet": ("pushjobs_edge_leader_quiet", ()),
    "instructions_refused": ("pushjobs_edge_instructions_refused", ()),
    "moved_away": ("pushjobs_edge_moved_away", ()),
    "fenced": ("pushjobs_edge_fences", ()),
    "expiry_deferred": ("pushjobs_edge_expiry_deferred", ("backlog",)),
    "expiry_deferred_leader_quiet": ("pushjobs_edge_expiry_deferred", ("leader_quiet",)),
    "commit_sent": ("pushjobs_edge_commands_sent", ("commit",)),
    "run_sent": ("pushjobs_edge_commands_sent", ("run",)),
    "abort_sent": ("pushjobs_edge_commands_sent", ("abort",)),
    # Commands it could not make or send, as the server counts its own (socket "command").
    "unsendable": ("pushjobs_edge_drops", ("command", "unsendable")),
    "unsealable": ("pushjobs_edge_drops", ("command", "unsealable")),
    # Reports to a leader slow to read them (its queue full): the leader missed news.
    "reports_dropped": ("pushjobs_edge_drops", ("leader", "queue_full")),
}
IN_HISTOGRAM = {"heartbeats"}

COUNTER_FAMILIES: dict[str, tuple[str, list[str]]] = {
    "pushjobs_edge_replies": ("Job replies read from nodes.", []),
    "pushjobs_edge_heartbeats_shed": (
        "Heartbeats dropped unread while the edge was behind (a newer one follows).",
        [],
    ),
    "pushjobs_edge_stalls": (
        "Times the edge could not read for longer than a heartbeat interval.",
        [],
    ),
    "pushjobs_edge_leader_quiet": (
        "Times the leader's heartbeats came back after a gap (its nodes got a full window).",
        [],
    ),
    "pushjobs_edge_instructions_refused": ("Leader instructions the edge could not read.", []),
    "pushjobs_edge_moved_away": ("Nodes asked to rediscover while the edge drains.", []),
    "pushjobs_edge_fences": (
        "Times the edge began holding job commands for want of the leader's grant.",
        [],
    ),
    "pushjobs_edge_expiry_deferred": (
        "Offline checks put off: heartbeats still queued or just shed (backlog), or the "
        "leader publishing no heartbeat (leader_quiet).",
        ["reason"],
    ),
    "pushjobs_edge_commands_sent": ("Commands sent to nodes, by kind.", ["kind"]),
    "pushjobs_edge_drops": ("Messages dropped, by socket and reason.", ["socket", "reason"]),
}


def families(load: Mapping[str, Any]) -> Iterator[Metric]:
    """Every metric of one edge's state: its load (``Edge._load``, absent until its first
    turn) and, while it serves one, ``leader`` (``with_leader``); ``{}`` while it waits."""
    leader = load.get("leader")
    yield gauge(
        "pushjobs_edge_serving",
        "1 while the edge serves a leader, 0 while it looks for one on the control topic.",
        leader is not None,
    )
    if leader is not None:
        serves = InfoMetricFamily("pushjobs_edge_leader", "The leader this edge serves.")
        serves.add_metric([], {"leader": leader["name"], "incarnation": leader["incarnation"]})
        yield serves
        if leader.get("epoch") is not None:
            yield gauge(
                "pushjobs_edge_leader_epoch", "The epoch of the leader it serves.", leader["epoch"]
            )
    if "nodes" in load:
        yield from _load(load)


def _load(load: Mapping[str, Any]) -> Iterator[Metric]:
    edge = InfoMetricFamily("pushjobs_edge", "This edge's name and incarnation (one per leader).")
    edge.add_metric([], {"edge": str(load["edge"]), "incarnation": str(load["incarnation"])})
    yield edge
    yield gauge(
        "pushjobs_edge_capacity",
        "Its share of the nodes against the other edges' ([edge] capacity).",
        load["capacity"],
    )
    # The leader's names, types and help for the figures it also shows per edge.
    yield gauge("pushjobs_edge_nodes", "Nodes the edge tracks.", load["nodes"])
    yield gauge("pushjobs_edge_nodes_online", "Nodes online through the edge.", load["online"])
    yield gauge(
        "pushjobs_edge_backlog",
        "1 while heartbeats wait unread at the edge (nobody is judged meanwhile).",
        bool(load["backlog"]),
    )
    yield gauge(
        "pushjobs_edge_heartbeat_lag_p99_seconds",
        "99th percentile heartbeat lag at the edge since it started.",
        load["lag_p99_ms"] / 1000,
    )
    yield gauge(
        "pushjobs_edge_fenced",
        "1 while no grant from the leader holds: job commands wait for one.",
        bool(load["fenced"]),
    )
    yield _edge_heartbeat_lag(load["heartbeat_lag_ms"])
    yield gauge(
        "pushjobs_edge_command_sockets", "Open command sockets to nodes.", load["command_sockets"]
    )
    yield from _counters(load)


def _edge_heartbeat_lag(sparse_ms: Mapping[str, int]) -> Metric:
    """The server's histogram (its buckets, its regrouping of the 1 ms one the intake
    keeps), under the edge's name: ``heartbeat_lag`` names its family itself."""
    server = heartbeat_lag(sparse_ms)
    buckets = [(s.labels["le"], s.value) for s in server.samples if s.name.endswith("_bucket")]
    (total,) = (s.value for s in server.samples if s.name.endswith("_sum"))
    family = HistogramMetricFamily(
        "pushjobs_edge_heartbeat_lag_seconds",
        "From a node heartbeat's timestamp to this edge reading it (1 ms resolution).",
    )
    family.add_metric([], buckets, total)
    return family


def _counters(load: Mapping[str, Any]) -> Iterator[Metric]:
    counted: Mapping[str, int] = load["counters"]
    # Every series the table names is served, at 0 until it counts: a series that appears
    # only with its first event hides that event from ``rate``.
    samples: dict[str, list[tuple[tuple[str, ...], float]]] = {
        name: [] for name in COUNTER_FAMILIES
    }
    for key, (name, labels) in COUNTER_FAMILY.items():
        samples[name].append((labels, counted.get(key, 0)))
    samples["pushjobs_edge_drops"].append((("command", "queue_full"), load["command_drops"]))
    samples["pushjobs_edge_drops"] += [(("reply", str(r)), n) for r, n in load["drops"].items()]
    for name, (documentation, label_names) in COUNTER_FAMILIES.items():
        family = CounterMetricFamily(name, documentation, labels=label_names)
        for labels, n in sorted(samples[name]):
            family.add_metric(list(labels), n)
        yield family
    other = sorted(
        (k, n) for k, n in counted.items() if k not in COUNTER_FAMILY and k not in IN_HISTOGRAM
    )
    if other:
        events = CounterMetricFamily(
            "pushjobs_edge_events", "Other events the edge counts, by name.", labels=["event"]
        )
        for key, n in other:
            events.add_metric([key], n)
        yield events


def with_leader(load: Mapping[str, Any], leader: Member) -> dict[str, Any]:
    """``load`` and the leader it serves, as ``families`` reads them."""
    return {
        **load,
        "leader": {"name": leader.name, "incarnation": leader.incarnation, "epoch": leader.epoch},
    }


# --- the endpoint ----------------------------------------------------------------------------


class Reporting(Protocol):
    """An edge as read here: its last load (``server.edge.edged.Edge``)."""

    @property
    def last_load(self) -> Mapping[str, Any]: ...


Serving = tuple[Reporting, Member]


class EdgeSnapshot(Snapshot):
    """A collector serving the edge that runs and the leader it serves; ``serving 0``
    while there is none.

    A ``Snapshot`` only to take the server's collector's place in ``MetricsEndpoint``:
    what it serves is read at each scrape (``serving``), never published into ``info``."""

    def __init__(self) -> None:
        super().__init__()
        self.serving: Serving | None = None

    def collect(self) -> Iterator[Metric]:
        serving = self.serving  # one read: a new leader in between changes nothing here
        if serving is None:
            yield from families({})
        else:
            edge, leader = serving
            yield from families(with_leader(edge.last_load, leader))


class EdgeMetrics(MetricsEndpoint):
    """The server's endpoint (bind, start and its log lines, close) serving the edge's
    figures: ``follow`` is ``serve``'s only call."""

    def __init__(self, bind: str) -> None:
        super().__init__(bind)
        self.status = EdgeSnapshot()
        self.snapshot = self.status  # what ``start`` registers

    def follow(self, serving: Serving | None) -> None:
        """Serve this edge and leader's figures from now on; None: looking for a leader."""
        self.status.serving = serving
