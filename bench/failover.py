"""Failover: how long a kill -9 of the leader leaves the installation without one, on
SQLite, on Kafka (librdkafka's mock cluster) and on a real Apache Kafka cluster (three
brokers, ``pushjobs.testbed.kafkabroker``), and the API load the server's liveness
tracking withstands.

Failovers. Two real servers share one installation (the leader and a standby, with the
server's default lease and heartbeat interval), three real agents list both. Each round
kills the leader with SIGKILL and measures, from the kill:

- takeover: until the standby answers an API call as leader (``server.info`` polled every
  50 ms on the standby alone);
- fleet: until every node is online on the new leader;
- job: a ``true`` job started on every node once they are all online there: from the
  kill until it completed (and the job alone);

then restarts the killed server, which stands by, and kills the leader again. The goal
(issue 14): SQLite takeover within the lease plus one heartbeat interval; Kafka within the
broker's group session timeout plus two intervals.

API load. One server (SQLite) with a simulated fleet heartbeating (default 10,000 nodes at
the default 1 s interval); for each stage, N client processes call ``server.info`` as fast
as they can for a window; the stage reports API calls per second and the false offline
transitions counted meanwhile (goal: none up to the API socket's saturation). The first
stage with any is the load at which a false offline first appears.

    python bench/failover.py [--rounds 3] [--backends sqlite,kafka,broker]
                             [--kafka-session-ms 6000]
                             [--nodes 10000] [--clients 1,2,4,8] [--window-s 10] [--skip-load]

The Kafka rounds host the mock cluster in a process of its own (``tests/log/mock_cluster.py``,
from a source checkout); it outlives both servers, as a real cluster would. The ``broker``
rounds run three KRaft brokers on loopback (replication factor 3, ``min.insync.replicas``
2); there the leader group's session is the servers' own ``leader_session_s`` (they set it
on the group), not ``--kafka-session-ms``, which is the mock's.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine import describe  # bench/ is sys.path[0] when run as a script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # the mock cluster's host and the two-server helpers

from pushjobs.api.client import ApiClient  # noqa: E402
from pushjobs.config import LivenessSettings  # noqa: E402
from pushjobs.errors import PushJobsError  # noqa: E402
from pushjobs.states import TERMINAL_JOB_STATES  # noqa: E402
from pushjobs.testbed.kafkabroker import KafkaCluster  # noqa: E402
from pushjobs.testbed.sandbox import Sandbox  # noqa: E402
from server.shell.serverconfig import ServerSection  # noqa: E402
from tests.e2e.standby import SECOND, api_of, kafka_log, start_second_server  # noqa: E402
from tests.log.kafka_support import MockClusterHost  # noqa: E402

TERMINAL = {state.value for state in TERMINAL_JOB_STATES}
STEP_S = 0.05
LIVE = LivenessSettings()
LEASE_S = ServerSection().leader_session_s


def client_for(sandbox: Sandbox, api: str, timeout_s: float = 1.0) -> ApiClient:
    keys = sandbox.root / "keys"
    return ApiClient.from_files(
        [api], keys / "server.pub", keys / f"{sandbox.user}.key", timeout_s=timeout_s
    )


def poll(check: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until ``check()`` holds, None if it did not within ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if check():
                return time.monotonic() - start
        except PushJobsError:
            pass
        time.sleep(STEP_S)
    return None


class Installation:
    """Two servers on one log, three agents listing both."""

    def __init__(
        self,
        root: Path,
        backend: str,
        host: MockClusterHost | None,
        session_ms: int,
        brokers: KafkaCluster | None = None,
    ):
        extra: dict[str, dict[str, object]] = {"server": {"leader_session_s": LEASE_S}}
        self.cluster = None
        if brokers is not None:
            extra["log"] = {"backend": "kafka", "bootstrap_servers": brokers.bootstrap}
        elif backend == "kafka":
            assert host is not None
            self.cluster = host.new_cluster(session_ms)
            extra["log"] = kafka_log(self.cluster)
        self.sandbox = Sandbox(
            root,
            interval_s=LIVE.interval_s,
            offline_threshold=LIVE.offline_threshold,
            online_threshold=LIVE.online_threshold,
            server_extra=extra,
        ).prepare()
        self.sandbox.start_server()
        standby = start_second_server(self.sandbox, timeout_s=60)
        self.apis = {"server": self.sandbox.api, SECOND: api_of(standby)}
        for name in self.sandbox.nodes:
            self.sandbox.write_agent_config(name, servers=list(self.apis.values()))
        self.sandbox.start_agents()
        self.leader = "server"

    def info(self, name: str) -> dict[str, Any]:
        with client_for(self.sandbox, self.apis[name]) as client:
            result: dict[str, Any] = client.call("server.info", {})
            return result

    def restart(self, name: str) -> None:
        if name == SECOND:
            start_second_server(self.sandbox, timeout_s=60)
        else:
            self.sandbox.start_server(timeout_s=60)

    def round(self) -> dict[str, Any]:
        old, new = self.leader, SECOND if self.leader == "server" else "server"
        nodes = len(self.sandbox.nodes)
        settled = poll(lambda: self.info(old)["nodes_online"] == nodes, 60)
        if settled is None:
            raise SystemExit(f"the fleet never came online on {old}")
        killed = time.monotonic()
        self.sandbox.kill(old, signal.SIGKILL)
        takeover = poll(lambda: self.info(new)["leader"], 120)
        fleet = poll(lambda: self.info(new)["nodes_online"] == nodes, 120)
        if fleet is not None:
            fleet = time.monotonic() - killed  # from the kill, as the takeover
        with client_for(self.sandbox, self.apis[new], timeout_s=10) as client:
            started = time.monotonic()
            job = client.call("job.start", {"command": "true", "nodes": self.sandbox.nodes})["job"]

            def done() -> bool:
                status = client.call("job.status", {"job_id": job["job_id"]})["job"]
                return bool(status["state"] in TERMINAL)

            took = poll(done, 60)
            state = client.call("job.status", {"job_id": job["job_id"]})["job"]
        self.restart(old)
        self.leader = new
        return {
            "takeover_s": takeover,
            "fleet_s": fleet,
            "job_s": took,
            "job_after_kill_s": (started - killed) + took if took is not None else None,
            "job_state": state["state"],
            "summary": state.get("summary"),
        }

    def close(self) -> None:
        self.sandbox.stop()
        if self.cluster is not None:
            self.cluster.close()


def failovers(backend: str, rounds: int, session_ms: int) -> list[dict[str, Any]]:
    host = MockClusterHost(session_timeout_ms=session_ms) if backend == "kafka" else None
    results = []
    try:
        with contextlib.ExitStack() as stack:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"pj-failover-{backend}-"))
            brokers = None
            if backend == "broker":
                brokers = stack.enter_context(KafkaCluster(Path(tmp) / "kafka", nodes=3))
            inst = Installation(Path(tmp) / "fleet", backend, host, session_ms, brokers)
            try:
                for i in range(rounds):
                    result = inst.round()
                    results.append(result)
                    print(f"  {backend} round {i + 1}: {fmt_round(result)}", flush=True)
            finally:
                inst.close()
    finally:
        if host is not None:
            host.close()
    return results


def fmt(value: float | None) -> str:
    return "  —  " if value is None else f"{value:5.1f}"


def fmt_round(r: dict[str, Any]) -> str:
    return (
        f"takeover {fmt(r['takeover_s'])} s, fleet on it {fmt(r['fleet_s'])} s, "
        f"job {fmt(r['job_s'])} s ({r['job_state']} {r['summary']})"
    )


# --- API load -------------------------------------------------------------------------


def flood(root: str, api: str, user: str, seconds: float, out: Any) -> None:
    """One client process: ``server.info`` as fast as answers come, for ``seconds``."""
    keys = Path(root) / "keys"
    calls = 0
    with ApiClient.from_files(
        [api], keys / "server.pub", keys / f"{user}.key", timeout_s=5.0
    ) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                client.call("server.info", {})
                calls += 1
            except PushJobsError:
                pass
    out.put(calls)


def api_load(nodes: int, stages: list[int], window_s: float) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="pj-failover-load-") as tmp:
        sandbox = Sandbox(
            Path(tmp) / "fleet",
            nodes=[],
            interval_s=LIVE.interval_s,
            offline_threshold=LIVE.offline_threshold,
            online_threshold=LIVE.online_threshold,
        ).prepare()
        try:
            sandbox.start_server()
            sandbox.start_simulator("sim", nodes, timeout_s=180)
            with client_for(sandbox, sandbox.api, timeout_s=10) as client:
                online = poll(lambda: client.call("server.info", {})["nodes_online"] >= nodes, 300)
                if online is None:
                    raise SystemExit(f"the {nodes} simulated nodes never came online")
                for clients in stages:
                    before = client.call("server.info", {})
                    queue: Any = multiprocessing.Queue()
                    procs = [
                        multiprocessing.Process(
                            target=flood,
                            args=(str(sandbox.root), sandbox.api, sandbox.user, window_s, queue),
                        )
                        for _ in range(clients)
                    ]
                    start = time.monotonic()
                    for p in procs:
                        p.start()
                    calls = sum(queue.get(timeout=window_s + 60) for _ in procs)
                    for p in procs:
                        p.join(10)
                    took = time.monotonic() - start
                    after = client.call("server.info", {})
                    offline = after["transitions"]["offline"] - before["transitions"]["offline"]
                    row = {
                        "clients": clients,
                        "api_per_s": calls / took,
                        "false_offline": offline,
                        "online": after["nodes_online"],
                    }
                    results.append(row)
                    print(
                        f"  {clients:>3} clients: {row['api_per_s']:8.0f} API calls/s, "
                        f"false offline {offline}, online {after['nodes_online']}/{nodes}",
                        flush=True,
                    )
        finally:
            sandbox.stop()
    return results


def summary(backend: str, rows: list[dict[str, Any]], session_ms: int) -> None:
    takeovers = [r["takeover_s"] for r in rows if r["takeover_s"] is not None]
    if backend == "sqlite":
        bound, what = LEASE_S + LIVE.interval_s, f"lease {LEASE_S:g} s + 1 interval"
    elif backend == "broker":
        # The broker expires the dead leader at the end of its session; the standby hears
        # of its assignment at its next group heartbeat (a fifth of the session, as the
        # servers set it) and claims the lease at its next renewal (a third).
        bound = LEASE_S * (1 + 1 / 5 + 1 / 3)
        what = f"session {LEASE_S:g} s (leader_session_s) + a group heartbeat + a renewal"
    else:
        session_s = session_ms / 1000
        bound = session_s + 2 * LIVE.interval_s
        what = f"session {session_s:g} s + 2 intervals"
    fleet = [r["fleet_s"] for r in rows if r["fleet_s"] is not None]
    jobs = [r["job_after_kill_s"] for r in rows if r["job_after_kill_s"] is not None]
    worst = max(takeovers) if takeovers else None
    met = worst is not None and len(takeovers) == len(rows) and worst <= bound
    print(
        f"{backend:<7} rounds {len(rows)}  takeover median {fmt(med(takeovers))} s "
        f"max {fmt(worst)} s  (goal ≤ {bound:.3g} s: {what}: {'met' if met else 'NOT met'})"
    )
    print(
        f"        fleet online on the new leader: median {fmt(med(fleet))} s max "
        f"{fmt(max(fleet) if fleet else None)} s;  then a job on every node, complete after "
        f"the kill: median "
        f"{fmt(med(jobs))} s"
    )


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="sqlite,kafka,broker")
    parser.add_argument("--kafka-session-ms", type=int, default=6000)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--clients", default="1,2,4,8")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--skip-load", action="store_true")
    args = parser.parse_args()
    print(describe())
    print(
        f"defaults: leader_session_s {LEASE_S:g} s (renewed every {LEASE_S / 3:.2f} s), "
        f"heartbeat interval {LIVE.interval_s:g} s, offline after {LIVE.offline_threshold} "
        f"missed; Kafka mock group.consumer.session.timeout.ms {args.kafka_session_ms}; "
        f"real brokers: the servers' leader_session_s"
    )
    results = {}
    for backend in args.backends.split(","):
        print(f"{backend}: {args.rounds} kill -9 failovers", flush=True)
        results[backend] = failovers(backend, args.rounds, args.kafka_session_ms)
    print()
    for backend, rows in results.items():
        summary(backend, rows, args.kafka_session_ms)
    if args.skip_load:
        return
    stages = [int(n) for n in args.clients.split(",")]
    print(f"\nAPI load on one server (sqlite) with {args.nodes} simulated nodes heartbeating:")
    rows = api_load(args.nodes, stages, args.window_s)
    first = next((r for r in rows if r["false_offline"]), None)
    peak = max(rows, key=lambda r: r["api_per_s"])
    if first is None:
        print(
            f"no false offline up to {peak['api_per_s']:.0f} API calls/s "
            f"({peak['clients']} clients, the highest rate reached)"
        )
    else:
        print(
            f"first false offline at {first['api_per_s']:.0f} API calls/s "
            f"({first['clients']} clients): {first['false_offline']} transitions"
        )


if __name__ == "__main__":
    main()
