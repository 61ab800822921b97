"""Fleet scale: one real server against simulated fleets of 1k to 50k nodes.

For each fleet size K it starts a real ``pushjobs-server`` (SQLite log, 1 s heartbeats)
and ``pushjobs simulate run`` processes playing K nodes over shared sockets, enrols the K
simulated keys in one registry write, waits for every node to be online, then measures:

- heartbeat capacity over a window (default 60 s): nodes tracked, heartbeats verified per
  second, false offline transitions (must be 0: no simulated node ever stops), server CPU %
  and RSS, and the heartbeat lag from the node's timestamp to the server's tracker (p50,
  p99; 1 ms resolution, sender queue + wire + server batch);
- job fan-out: ``true`` on all K nodes, a few times: start to voting done (every commit
  acked) and to complete, from the job's own timestamps; the client's wall time to see it
  complete; and per-node latencies (commit ack, run finish) inside the job;
- the same-run baseline: what the pure protocol path (verify, decode, replay check,
  tracker) costs per heartbeat in this process, against the server's CPU per heartbeat.

Then a table of how each figure grows with K and, where matplotlib is installed, a PNG.

Goals from the issue (measured here, never asserted in tests): 50,000 nodes at 1 s
heartbeats on this 2-core machine, simulators included, with zero false offline
transitions and server RSS under 1 GiB; a job on 1,000 nodes completes within 1 s of
start, on 10,000 within 3 s.

    python bench/fleet.py [--sizes 1000,5000,10000,20000,50000] [--window-s 60]
                          [--jobs 3] [--per-sim 25000] [--plot fleet.png] [--json out.json]
                          [--edges 0,1,2]

``--edges`` runs every size once per edge count (``[server] edges``); 0, the one-process
server, is the baseline of the same run. CPU, RSS and heartbeat figures then cover the
leader and its edges together (per process too), heartbeats as the edges read them.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.api.client import ApiClient
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.signing import HmacVerifier
from pushjobs.states import TERMINAL_JOB_STATES
from pushjobs.testbed.sandbox import Proc, Sandbox
from server.core.nodetable import NodeTable

TICKS = os.sysconf("SC_CLK_TCK")
TERMINAL = {state.value for state in TERMINAL_JOB_STATES}


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def memory_mib(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) in MiB."""
    values = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                values[key] = int(value.split()[0]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def percentile(hist: dict[int, int], q: float) -> float:
    total = sum(hist.values())
    if not total:
        return math.nan
    rank = q * (total - 1)
    seen = 0
    for ms in sorted(hist):
        seen += hist[ms]
        if seen > rank:
            return float(ms)
    return float(max(hist))


def pcts(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": math.nan, "p99": math.nan, "max": math.nan}
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, round(q * (len(values) - 1)))]  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": values[-1]}


def baseline_us_per_heartbeat(count: int = 50_000) -> float:
    """The pure receive path per heartbeat: verify, decode, replay window, tracker."""
    from agent.simulator.simnode import SimNode

    key = secrets.token_bytes(32)
    nodes = [SimNode(i, f"sim-{i:05d}") for i in range(2000)]
    for node in nodes:
        node.configure("s1", key, 0.0)
    now_ms = time.time_ns() // 1_000_000
    frames = [nodes[i % 2000].heartbeat_frames("tcp://127.0.0.1:1", now_ms) for i in range(count)]
    verifiers = {"s1": HmacVerifier(key)}
    inbox = Inbox(lambda method, kid: verifiers[kid], 300.0)
    table = NodeTable(LivenessTracker(1.0, 3, 2))
    start = time.perf_counter()
    now = time.monotonic()
    for f in frames:
        r = inbox.accept(f, now_ms)
        assert r is not None
        msg = r.message
        table.heartbeat(
            msg.sender,
            msg.incarnation,
            msg.command_endpoint,  # type: ignore[attr-defined]
            None,
            None,
            restarted=r.restarted,
            now=now,
        )
    took = time.perf_counter() - start
    return took / count * 1e6


def info(client: ApiClient) -> dict[str, Any]:
    result: dict[str, Any] = client.call("server.info", {})
    return result


def wait_online(client: ApiClient, k: int, timeout_s: float) -> float:
    start = time.monotonic()
    last = -1
    while time.monotonic() - start < timeout_s:
        online = info(client)["nodes_online"]
        if online >= k:
            return time.monotonic() - start
        if online != last:
            print(f"    {online}/{k} online", flush=True)
            last = online
        time.sleep(1.0)
    raise SystemExit(f"only {last} of {k} nodes online after {timeout_s:g} s")


def server_pids(client: ApiClient, server_pid: int) -> list[int]:
    """The server and its edges: every process that serves the fleet."""
    return [server_pid, *(e["pid"] for e in info(client)["edges"] if e["pid"])]


def heartbeat_window(
    client: ApiClient, server_pid: int, sims: list[Proc], window_s: float
) -> dict[str, Any]:
    before = info(client)
    pids = server_pids(client, server_pid)
    cpu0 = {pid: cpu_s(pid) for pid in pids}
    sim_cpu0 = sum(cpu_s(p.pid) for p in sims)
    t0 = time.monotonic()
    time.sleep(window_s)
    took = time.monotonic() - t0
    after = info(client)
    per_process = {pid: 100 * (cpu_s(pid) - cpu0[pid]) / took for pid in pids}
    cpu = sum(cpu_s(pid) - cpu0[pid] for pid in pids)
    sim_cpu = sum(cpu_s(p.pid) for p in sims) - sim_cpu0
    hist = {
        int(ms): n - int(before["heartbeat_lag_ms"].get(ms, 0))
        for ms, n in after["heartbeat_lag_ms"].items()
    }
    beats = after["heartbeats"] - before["heartbeats"]
    memory = [memory_mib(pid) for pid in pids]
    rss, peak = sum(m[0] for m in memory), sum(m[1] for m in memory)
    return {
        "processes": len(pids),
        "cpu_pct_per_process": [round(v, 1) for v in per_process.values()],
        "rss_mib_per_process": [round(m[0]) for m in memory],
        "tracked": after["nodes_known"],
        "online": after["nodes_online"],
        "heartbeats_per_s": beats / took,
        "false_offline": after["transitions"]["offline"] - before["transitions"]["offline"],
        "server_cpu_pct": 100 * cpu / took,
        "server_cpu_us_per_hb": cpu / beats * 1e6 if beats else math.nan,
        "rss_kib_per_node": rss * 1024 / max(1, after["nodes_known"]),
        "sim_cpu_pct": 100 * sim_cpu / took,
        "server_rss_mib": rss,
        "server_peak_rss_mib": peak,
        "lag_p50_ms": percentile(hist, 0.5),
        "lag_p99_ms": percentile(hist, 0.99),
        "drops": after["drops"],
    }


def run_job(client: ApiClient, k: int) -> dict[str, Any]:
    sent = time.monotonic()
    job = client.call("job.start", {"command": "true", "nodes": ["sim-*"], "quorum": "100%"})["job"]
    while job["state"] not in TERMINAL:
        params = {"job_id": job["job_id"], "version": job["version"], "wait_s": 5.0}
        job = client.call("job.watch", {**params, "nodes": False})["job"]
    wall = time.monotonic() - sent
    full = client.call("job.status", {"job_id": job["job_id"]})["job"]
    nodes = full["nodes"].values()
    created, started = full["created_ms"], full["started_ms"] or full["created_ms"]
    run_started = full["run_started_ms"]
    ack = [n["voted_ms"] - started for n in nodes if n["voted_ms"] is not None]
    done = [
        n["finished_ms"] - run_started
        for n in nodes
        if n["finished_ms"] is not None and run_started is not None
    ]
    return {
        "state": full["state"],
        "summary": full["summary"],
        "targets": len(full["nodes"]),
        "voting_done_s": ((run_started or full["finished_ms"]) - created) / 1000,
        "complete_s": (full["finished_ms"] - created) / 1000,
        "run_phase_s": (full["finished_ms"] - run_started) / 1000 if run_started else math.nan,
        "client_wall_s": wall,
        "commit_ack_ms": pcts(ack),
        "run_finish_ms": pcts(done),
        "all_succeeded": full["summary"].get("succeeded", 0) == k,
    }


def one_size(k: int, args: argparse.Namespace, edges: int = 0) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"pushjobs-fleet-{k}-"))
    sandbox = Sandbox(
        root,
        nodes=[],
        interval_s=args.interval,
        offline_threshold=3,
        online_threshold=2,
        server_extra={
            "server": {"registry_check_s": 2.0, "leader_session_s": 5.0, "edges": edges},
            "jobs": {"vote_timeout_s": 60.0, "run_timeout_s": 120.0, "max_nodes": 1_000_000},
        },
    )
    out: dict[str, Any] = {"nodes": k, "interval_s": args.interval, "edges": edges}
    with sandbox:
        sandbox.prepare()
        server = sandbox.start_server(timeout_s=60)
        procs = max(1, math.ceil(k / args.per_sim))
        share = math.ceil(k / procs)
        started = time.monotonic()
        sims = []
        for p in range(procs):
            first, count = p * share, min(share, k - p * share)
            sims.append(sandbox.start_simulator(f"sim{p}", count, first=first, timeout_s=120))
        out["enrol_and_start_s"] = time.monotonic() - started
        out["simulators"] = procs
        for sim in sims:
            sim.read_line(300)  # "configured nodes=... in ...s"
        out["configured_s"] = time.monotonic() - started
        client = ApiClient.from_files(
            sandbox.api, root / "keys" / "server.pub", root / "keys" / "admin.key", timeout_s=60
        )
        wait_online(client, k, 300)
        out["all_online_s"] = time.monotonic() - started
        print(f"  {k} nodes online after {out['all_online_s']:.1f} s; heartbeat window", flush=True)
        time.sleep(args.settle_s)  # past the online burst: measure the steady state
        out["heartbeat"] = heartbeat_window(client, server.pid, sims, args.window_s)
        print(f"  heartbeat: {orjson.dumps(out['heartbeat']).decode()}", flush=True)
        jobs = []
        for _ in range(args.jobs):
            jobs.append(run_job(client, k))
            j = jobs[-1]
            print(
                f"  job: {j['state']} {j['summary']} voting {j['voting_done_s']:.3f} s, "
                f"complete {j['complete_s']:.3f} s, client {j['client_wall_s']:.3f} s",
                flush=True,
            )
        out["jobs"] = jobs
        out["server_rss_after_jobs_mib"] = sum(
            memory_mib(pid)[0] for pid in server_pids(client, server.pid)
        )
        # Whole run: the full collections of the enrolment burst and of the jobs.
        out["server_gc"] = info(client).get("gc", {})
        if out["server_gc"]:
            gc = out["server_gc"]
            print(
                f"  server gc: full collections {gc['collections'][2]}, "
                f"pauses total {gc['pause_total_ms'][2]:.0f} ms, "
                f"longest {gc['pause_max_ms'][2]:.0f} ms",
                flush=True,
            )
        client.close()
    return out


def median(jobs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(j[key] for j in jobs) if jobs else math.nan


def report(results: list[dict[str, Any]], baseline_us: float) -> None:
    print()
    print(
        f"{'K':>6} {'edges':>5} {'sims':>4} {'online':>7} {'hb/s':>7} {'false':>5} {'srvCPU%':>7} "
        f"{'us/hb':>6} {'simCPU%':>7} {'RSS MiB':>7} {'lag p50':>7} {'p99':>5} "
        f"{'vote s':>7} {'done s':>7} {'wall s':>7}"
    )
    for r in results:
        h, jobs = r["heartbeat"], r["jobs"]
        print(
            f"{r['nodes']:>6} {r.get('edges', 0):>5} {r['simulators']:>4} "
            f"{r['all_online_s']:>6.1f}s "
            f"{h['heartbeats_per_s']:>7.0f} {h['false_offline']:>5} {h['server_cpu_pct']:>7.1f} "
            f"{h['server_cpu_us_per_hb']:>6.1f} {h['sim_cpu_pct']:>7.1f} "
            f"{h['server_peak_rss_mib']:>7.0f} {h['lag_p50_ms']:>7.0f} {h['lag_p99_ms']:>5.0f} "
            f"{median(jobs, 'voting_done_s'):>7.3f} {median(jobs, 'complete_s'):>7.3f} "
            f"{median(jobs, 'client_wall_s'):>7.3f}"
        )
    print(
        f"\nbaseline (same run): the pure receive path costs {baseline_us:.1f} us per heartbeat "
        "in one process; 'us/hb' above is the server's whole CPU per heartbeat"
    )
    if len(results) > 1:
        a, b = results[0], results[-1]
        ha, hb = a["heartbeat"], b["heartbeat"]
        cpu = hb["server_cpu_pct"] / max(ha["server_cpu_pct"], 1e-9)
        rss = hb["server_peak_rss_mib"] / ha["server_peak_rss_mib"]
        job = median(b["jobs"], "complete_s") / median(a["jobs"], "complete_s")
        print(
            f"growth {a['nodes']} -> {b['nodes']} nodes (x{b['nodes'] / a['nodes']:g}): "
            f"server CPU x{cpu:.1f}, peak RSS x{rss:.1f}, job complete x{job:.1f}"
        )
    print("\ngoals:")
    for r in results:
        h, k = r["heartbeat"], r["nodes"]
        no_false = h["false_offline"] == 0 and h["online"] >= k
        # Held with room to spare: heartbeats reach the tracker within one interval. A
        # saturated server that defers expiry shows no false offline but lags seconds.
        comfortable = no_false and h["lag_p99_ms"] < 1000 * args_interval(r)
        held = no_false and h["server_peak_rss_mib"] < 1024
        done = median(r["jobs"], "complete_s")
        goal = 1.0 if k <= 1000 else 3.0 if k <= 10_000 else None
        job_note = (
            f"; job {done:.2f} s (goal {goal:g} s: {'met' if done <= goal else 'MISSED'})"
            if goal
            else f"; job {done:.2f} s"
        )
        state = "held" if comfortable else "held, saturated (lag p99 >= 1 interval)"
        print(f"  {k:>6} nodes: heartbeats {state if held else 'NOT HELD'}{job_note}")
    held_sizes = [
        r["nodes"]
        for r in results
        if r["heartbeat"]["false_offline"] == 0 and r["heartbeat"]["online"] >= r["nodes"]
    ]
    easy = [
        r["nodes"]
        for r in results
        if r["nodes"] in held_sizes and r["heartbeat"]["lag_p99_ms"] < 1000 * args_interval(r)
    ]
    print(f"  largest K with zero false offline: {max(held_sizes) if held_sizes else 'none'}")
    print(f"  largest K with heartbeat lag p99 under one interval: {max(easy) if easy else 'none'}")


def args_interval(result: dict[str, Any]) -> float:
    return float(result.get("interval_s", 1.0))


def plot(results: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    ks = [r["nodes"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    axes[0].plot(ks, [r["heartbeat"]["server_cpu_pct"] for r in results], "o-", label="server")
    axes[0].plot(ks, [r["heartbeat"]["sim_cpu_pct"] for r in results], "s--", label="simulators")
    axes[0].set(title="CPU % at 1 s heartbeats", xlabel="nodes", ylabel="% of one core")
    axes[0].legend()
    axes[1].plot(ks, [r["heartbeat"]["server_peak_rss_mib"] for r in results], "o-")
    axes[1].set(title="server peak RSS", xlabel="nodes", ylabel="MiB")
    axes[2].plot(
        ks, [median(r["jobs"], "voting_done_s") for r in results], "o-", label="voting done"
    )
    axes[2].plot(ks, [median(r["jobs"], "complete_s") for r in results], "s-", label="complete")
    axes[2].set(title="job 'true' on all nodes", xlabel="nodes", ylabel="seconds from start")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000,20000,50000")
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--per-sim", type=int, default=25_000, help="nodes per simulator process")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--plot", type=Path, default=Path("fleet.png"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--edges",
        default="0",
        help="comma-separated edge counts to run each size with ([server] edges); "
        "0 is the one-process server, the baseline: e.g. --edges 0,1",
    )
    args = parser.parse_args()
    print(describe())
    print(
        f"heartbeat interval {args.interval:g} s, window {args.window_s:g} s, "
        f"{args.jobs} jobs per size"
    )
    baseline = baseline_us_per_heartbeat()
    results = []
    for k in (int(s) for s in args.sizes.split(",")):
        for edges in (int(e) for e in args.edges.split(",")):
            print(f"\n== {k} nodes, edges = {edges}", flush=True)
            results.append(one_size(k, args, edges))
    report(results, baseline)
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    plot(results, args.plot)


if __name__ == "__main__":
    main()
