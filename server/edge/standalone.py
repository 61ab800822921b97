"""``pushjobs-edge``: an edge of its own, on any host, that finds its leader in the log.

Theory of operation. The leader of an installation whose ``[server] edge_bind`` is set
names, in its record on the log's ``control`` topic (``server.shell.membership``), where
its edge channel listens and the settings its edges share with it (``Member.edge``). This
program reads that topic until a fresh leader's record names one, then runs an edge
(``server.edge.edged.Edge``, the one a leader starts for itself) connected to it, under
the server's identity from ``[server] key_file``: the channel admits the server's key
only, so an edge proves it holds it. The leader places nodes on it as on its own edges
(rendezvous hashing over the live ones) and reports it in ``server status``.

When the leader falls silent (killed, deposed, cut off) the edge stops serving it (and
sending commands: ``server.core.edgelease``) and this program reads the control topic
again for the next leader, skipping the one it lost unless that one writes again (it
was only paused). The edge keeps its sockets, its nodes' sessions and what they told
the leader at discovery, and hands them to the next leader after its hello: its nodes,
which hear heartbeats the edge signs under its own incarnation, stay where they are and
ask nobody for a config (if the next leader comes within their patience: a few offline
windows of silence; otherwise they rediscover, and land where rendezvous hashing puts
them). A next leader whose shared settings differ (interval, thresholds, limits) gets a
new edge instead, and the nodes move. An edge serves one leader at a time, and only
while it hears it; it holds nothing durable.

On SQLite the log is a file on the leader's host, so the edge runs there too: the file
must exist (an edge never creates a log), and the leader binds its edge channel on
loopback only. Edges on other hosts need Kafka.

Its metrics (``server.edge.edgemetrics``, ``[edge] metrics_bind``) are served from one
endpoint started before the first leader is looked for and kept through every edge:
``serve`` tells it which edge runs for which leader, and that none does while it looks.

Exit codes: 0 stopped (SIGTERM, SIGINT), 1 failed, 2 bad arguments, 9 bad configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pushjobs import __version__, collector, logsetup, paths
from pushjobs.cli.exitcodes import Exit
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, LogError, PushJobsError
from pushjobs.log import topics
from pushjobs.log.base import OrderedLog
from pushjobs.log.factory import open_log
from server.edge.edgeconfig import CONFIG_FILE, EdgeConfig
from server.edge.edged import Edge, EdgeSpec
from server.edge.edgemetrics import EdgeMetrics
from server.shell.membership import EDGE, STALE_SESSIONS, Member, Roster

log = logging.getLogger("pushjobs.edge")
PROGRAM = "pushjobs-edge"
LOOK_EVERY_S = 0.5  # how often the control topic is read while no leader takes edges
SAY_WAITING_EVERY_S = 30.0
READ_BATCH = 1000


class LeaderFinder:
    """The control topic, read on: the leader that takes edges, as its records tell."""

    def __init__(self, log_: OrderedLog, topic: str, stale_ms: int) -> None:
        self.log = log_
        self.topic = topic
        self.roster = Roster(stale_ms)
        self.offset = 0

    def leader(self, now_ms: int, *, lost: tuple[str, int] | None = None) -> Member | None:
        """The leader to join: not ``lost`` (the incarnation this edge stopped serving,
        and when, wall ms) unless it wrote its record again since: a leader killed still
        has a fresh record for a while, a leader paused and back writes a newer one."""
        while True:
            batch = self.log.read(self.topic, self.offset, READ_BATCH)
            for record in batch:
                self.roster.apply(record.key, record.value)
                self.offset = record.offset + 1
            if len(batch) < READ_BATCH:
                break
        found = self.roster.leader(now_ms, besides=lost[0] if lost else None)
        if found is None and lost is not None:
            again = self.roster.leader(now_ms)
            if again is not None and again.incarnation == lost[0] and again.ts > lost[1]:
                found = again
        return found if found is not None and found.edge is not None else None


class Pong:
    """The edge's own record on the control topic, written every ``every_s`` from a
    thread of its own (a slow log must not hold the edge's loop), and a tombstone at the
    end: who it is, whom it serves, its share. Its own log handle: a SQLite connection
    stays with the thread that opened it."""

    def __init__(
        self, config: EdgeConfig, edge: Edge, leader: Member, topic: str, every_s: float
    ) -> None:
        self.config = config
        self.edge = edge
        self.serves = leader.incarnation
        self.topic = topic
        self.every_s = every_s
        self.done = threading.Event()
        self.failing = False
        self.thread = threading.Thread(target=self._run, name="pushjobs-edge-pong", daemon=True)

    def __enter__(self) -> Pong:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=self.every_s + 10.0)

    def record(self, now_ms: int) -> Member:
        edge, load = self.edge, self.edge.last_load
        return Member(
            name=edge.spec.name,
            incarnation=edge.incarnation,
            role=EDGE,
            epoch=None,
            api="",
            heartbeat=edge.endpoints["heartbeat"],
            reply=edge.endpoints["reply"],
            ts=now_ms,
            serves=self.serves,
            nodes=int(load.get("nodes", 0)),
            online=int(load.get("online", 0)),
            capacity=edge.spec.capacity,
            version=__version__,
            rate=float(load.get("rate", 0.0)),
            lag_p99_ms=float(load.get("lag_p99_ms", 0.0)),
        )

    def _run(self) -> None:
        try:
            ordered = open_edge_log(self.config)
        except PushJobsError as exc:
            log.error("edge %s: no record on the control topic: %s", self.edge.spec.name, exc)
            return
        key = self.record(0).key
        try:
            while not self.done.is_set():
                self._write(ordered, key, self.record(time.time_ns() // 1_000_000).encode())
                self.done.wait(self.every_s)
            self._write(ordered, key, None)  # gone: the next leader's edge is a new record
        finally:
            ordered.close()

    def _write(self, ordered: OrderedLog, key: str, value: bytes | None) -> None:
        try:
            ordered.append(self.topic, key, value)
        except LogError as exc:
            if not self.failing:
                log.error("edge %s: cannot write its control record: %s", self.edge.spec.name, exc)
            self.failing = True
            return
        self.failing = False


def spec_for(config: EdgeConfig, leader: Member) -> EdgeSpec:
    """The edge's spec: its own part from its config, the shared part from ``leader``."""
    assert leader.edge is not None
    section = config.edge
    shared = leader.edge
    return EdgeSpec(
        name=section.name,
        server_name=config.server.name,
        key_file=str(config.server.key_path()),
        leader_endpoint=shared["endpoint"],
        bind_host=section.bind_host,
        advertise_host=section.advertise_host or section.bind_host,
        interval_s=float(shared["interval_s"]),
        offline_threshold=int(shared["offline_threshold"]),
        online_threshold=int(shared["online_threshold"]),
        max_skew_s=float(shared["max_skew_s"]),
        max_header_bytes=int(shared["max_header_bytes"]),
        max_body_bytes=int(shared["max_body_bytes"]),
        parent_pid=0,
        index=0,
        port_base=section.port_base,
        remote=True,
        capacity=section.capacity,
    )


SHARED = (
    "server_name",
    "interval_s",
    "offline_threshold",
    "online_threshold",
    "max_skew_s",
    "max_header_bytes",
    "max_body_bytes",
)


def same_settings(a: EdgeSpec, b: EdgeSpec) -> bool:
    """Whether an edge built for ``a`` may serve as ``b`` (its nodes' configs hold these)."""
    return all(getattr(a, name) == getattr(b, name) for name in SHARED)


def open_edge_log(config: EdgeConfig) -> OrderedLog:
    """The installation's log, never created here: on SQLite, the leader's own file."""
    settings = dataclasses.replace(config.log, create=False)
    try:
        return open_log(settings)
    except LogError as exc:
        if settings.backend == "sqlite":
            raise ConfigError(
                f"{exc}: on SQLite an edge runs on its leader's host and reads the "
                "leader's log file ([log] path); edges on other hosts need Kafka",
                key="log.path",
            ) from None
        raise


def serve(
    config: EdgeConfig, stopping: threading.Event, running: list[Edge], metrics: EdgeMetrics
) -> None:
    """Edges for one leader after another, until ``stopping``; the one serving is in
    ``running`` (for the signal handler), and in ``metrics`` with its leader."""
    ordered = open_edge_log(config)
    edge: Edge | None = None  # kept from one leader to the next, with its nodes
    try:
        stale_ms = round(STALE_SESSIONS * config.server.leader_session_s * 1000)
        pong_every_s = config.server.leader_session_s / 3  # as often as the servers write
        finder = LeaderFinder(ordered, topics.names(config.log.topic_prefix).control, stale_ms)
        said_at = float("-inf")
        lost: tuple[str, int] | None = None
        while not stopping.is_set():
            try:
                leader = finder.leader(time.time_ns() // 1_000_000, lost=lost)
            except LogError as exc:
                log.error("cannot read the control topic: %s; trying again", exc)
                leader = None
            if leader is None:
                if time.monotonic() - said_at >= SAY_WAITING_EVERY_S:
                    log.info(
                        "waiting for a leader that takes edges ([server] edge_bind) on %s",
                        finder.topic,
                    )
                    said_at = time.monotonic()
                stopping.wait(LOOK_EVERY_S)
                continue
            log.info(
                "edge %s: joining leader %s (epoch %s) at %s",
                config.edge.name,
                leader.name,
                leader.epoch,
                leader.edge["endpoint"] if leader.edge else "?",
            )
            spec = spec_for(config, leader)
            if edge is not None and not same_settings(edge.spec, spec):
                log.warning(
                    "edge %s: leader %s shares other settings than the last: a new edge, "
                    "its nodes move",
                    config.edge.name,
                    leader.name,
                )
                edge.close()
                edge = None
            if edge is None:
                edge = Edge(spec)
            else:
                edge.rejoin(spec.leader_endpoint)  # its nodes stay
            running.append(edge)
            # No publishing thread: a scrape reads the edge's own last load, which its
            # loop replaces every half interval (``edgemetrics``), as fresh as it gets.
            metrics.follow((edge, leader))
            try:
                with Pong(config, edge, leader, finder.topic, pong_every_s):
                    edge.run()
            finally:
                metrics.follow(None)  # serving 0 until the next leader is joined
                running.remove(edge)
            if not edge.leader_gone:
                return
            lost = (leader.incarnation, time.time_ns() // 1_000_000)
            said_at = float("-inf")
    finally:
        if edge is not None:
            edge.close()
        ordered.close()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A pushjobs edge of its own: reads the heartbeats and replies of a share "
        "of the fleet and sends its commands, for whichever server leads. It finds the "
        "leader on the log's control topic (the leader needs [server] edge_bind).",
        epilog="Metrics for Prometheus at http://HOST:PORT/metrics: [edge] metrics_bind "
        '(default 127.0.0.1:9466; "" turns them off).\n'
        "Exit codes: 0 stopped (SIGTERM), 1 failed, 9 bad configuration.\n"
        f"Example: {PROGRAM} --config /etc/pushjobs/edge.toml --log-format json",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help=f"edge TOML file (default: {paths.config_dir() / CONFIG_FILE} if present)",
    )
    parser.add_argument("--version", action="version", version=f"{PROGRAM} {__version__}")
    logsetup.add_arguments(parser)
    return parser.parse_args(argv)


def _fail(exc: PushJobsError) -> NoReturn:
    sys.stderr.write(f"{PROGRAM}: error: {exc}\n")
    code = Exit.CONFIG if isinstance(exc, ConfigError) else Exit.FAILED
    raise SystemExit(int(code)) from None


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    collector.tune()
    try:
        logs = logsetup.from_arguments(PROGRAM, args)
        path = args.config if args.config is not None else paths.default_config(CONFIG_FILE)
        config = load_config(EdgeConfig, path)
    except PushJobsError as exc:
        _fail(exc)
    stopping = threading.Event()
    running: list[Edge] = []

    def stop(signum: int, frame: object) -> None:
        stopping.set()
        for edge in running:
            edge.stopping = True

    def hup(signum: int, frame: object) -> None:
        log.info("SIGHUP: %s", logs.reopen())

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hup)
    log.info("%s %s starting (pid %d)", PROGRAM, __version__, os.getpid())
    # Started once, before any leader is found: it says "serving 0" while none is, and
    # outlives every edge. A port already taken is logged and the edge serves on.
    metrics = EdgeMetrics(config.edge.metrics_bind)
    metrics.start()
    try:
        serve(config, stopping, running, metrics)
    except PushJobsError as exc:
        _fail(exc)
    finally:
        metrics.close()
    raise SystemExit(int(Exit.OK))


if __name__ == "__main__":
    main()
