"""Overload: a fleet offering several times what the server can read.

The issue's promise under overload: the server says so (``server status``, metrics), judges
no node on heartbeats it could not read (no false offline among nodes that kept sending),
and a job still ends with every live node ``succeeded`` (a reply that sat in a queue is read
late, one dropped at a bound is asked again).

A 2-core machine cannot offer a Python server three times what it reads with simulators
that share its cores, so the server is made slower instead: a throttle thread stops and
continues every serving process (the server and its edges) with SIGSTOP/SIGCONT, letting
them run ``--duty`` of each 100 ms (``pushjobs.testbed.throttle``). The bench:

1. starts the server (``--edges`` 0: one process, or N edges) and a simulator of
   ``--nodes`` nodes, and waits until every node is online, unthrottled;
2. baseline, same run: over ``--window-s`` unthrottled, heartbeats read per second (what
   the fleet offers), and ``true`` on every node;
3. throttled over the same window: heartbeats read per second (the overload factor is
   offered / read), offline transitions (must be 0: no simulated node stops), what
   ``server status`` says, and ``true`` on every node (must be ``complete``, every node
   ``succeeded``).

    python bench/overload.py [--nodes 6000] [--duty 0.05] [--window-s 30] [--edges 0,1]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet import info, run_job, server_pids, wait_online  # bench/ is sys.path[0]
from machine import describe

from pushjobs.api.client import ApiClient
from pushjobs.cli.server_commands import lines as status_lines
from pushjobs.testbed.sandbox import Sandbox
from pushjobs.testbed.throttle import Throttle


def heartbeats_read(client: ApiClient) -> int:
    now = info(client)
    if now.get("edges"):
        return sum(int(e.get("heartbeats", 0)) for e in now["edges"])
    return int(now["heartbeats"])


def window(client: ApiClient, window_s: float) -> dict[str, Any]:
    """Heartbeats read per second and offline transitions over ``window_s``; the status
    lines that speak of overload, as they were at the window's end."""
    before, beats0, t0 = info(client), heartbeats_read(client), time.monotonic()
    time.sleep(window_s)
    after, beats1 = info(client), heartbeats_read(client)
    took = time.monotonic() - t0
    said = [
        f"{label}: {text}"
        for label, text in status_lines(after)
        if label in ("reading", "edge", "heartbeats")
    ]
    return {
        "read_per_s": (beats1 - beats0) / took,
        "false_offline": after["transitions"]["offline"] - before["transitions"]["offline"],
        "online": after["nodes_online"],
        "expiry_deferred": after.get("expiry_deferred", 0) - before.get("expiry_deferred", 0),
        "status": said,
    }


def one(edges: int, args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pushjobs-overload-"))
    sandbox = Sandbox(
        root,
        nodes=[],
        interval_s=1.0,
        offline_threshold=3,
        online_threshold=2,
        server_extra={
            "server": {"registry_check_s": 2.0, "leader_session_s": 5.0, "edges": edges},
            "jobs": {"vote_timeout_s": 120.0, "run_timeout_s": 300.0, "max_nodes": 1_000_000},
        },
    )
    out: dict[str, Any] = {"edges": edges, "nodes": args.nodes, "duty": args.duty}
    with sandbox:
        sandbox.prepare()
        server = sandbox.start_server(timeout_s=60)
        sim = sandbox.start_simulator("sim0", args.nodes, first=0, timeout_s=120)
        sim.read_line(300)
        client = ApiClient.from_files(
            sandbox.api, root / "keys" / "server.pub", root / "keys" / "admin.key", timeout_s=120
        )
        with client:
            wait_online(client, args.nodes, 300)
            time.sleep(args.window_s / 3)  # past the online burst
            out["baseline"] = window(client, args.window_s)
            out["baseline_job"] = run_job(client, args.nodes)
            print(f"  edges={edges} unthrottled: {summary(out['baseline'], out['baseline_job'])}")
            offline_before = info(client)["transitions"]["offline"]
            with Throttle(server_pids(client, server.pid), args.duty):
                out["overload"] = window(client, args.window_s)
                out["overload_job"] = run_job(client, args.nodes)
                out["after_job"] = window(client, args.window_s / 2)
            # The whole throttled time, the job's too: every node kept sending.
            out["false_offline"] = info(client)["transitions"]["offline"] - offline_before
            print(f"  edges={edges} throttled:   {summary(out['overload'], out['overload_job'])}")
            print(f"    offline transitions while throttled (job included): {out['false_offline']}")
            for line in out["overload"]["status"]:
                print(f"    status said: {line}")
    return out


def summary(w: dict[str, Any], job: dict[str, Any]) -> str:
    return (
        f"read {w['read_per_s']:,.0f} heartbeats/s, {w['false_offline']} false offline, "
        f"{w['online']:,} online; job {job['state']} {job['summary']} in {job['complete_s']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=6000)
    parser.add_argument("--duty", type=float, default=0.05, help="share of each 100 ms run")
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--edges", default="0,1")
    args = parser.parse_args()
    print(describe())
    print(
        f"{args.nodes:,} nodes at 1 s heartbeats; serving processes run {args.duty:.0%} of the time"
    )
    results = [one(int(e), args) for e in args.edges.split(",")]
    print("\n edges  offered/s  read/s  factor  false offline  job (throttled)          goal")
    for r in results:
        offered = r["baseline"]["read_per_s"]
        read = r["overload"]["read_per_s"]
        job = r["overload_job"]
        false_offline = r["false_offline"]
        met = false_offline == 0 and job["all_succeeded"] and read * 2.5 <= offered
        print(
            f" {r['edges']:>5}  {offered:>9,.0f}  {read:>6,.0f}  {offered / max(read, 1):>5.1f}x"
            f"  {false_offline:>13}  {job['state']:>9} in {job['complete_s']:>6.1f} s"
            f"  {'met' if met else 'NOT met'}"
        )
    print(
        "goal: offered about three times what is read, 0 false offline, every node "
        "succeeded, the overload said in server status"
    )


if __name__ == "__main__":
    main()
