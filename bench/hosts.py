"""Edges on other hosts: a leader here, one ``pushjobs-edge`` in each of H test hosts
(network namespaces, ``pushjobs.testbed.netns``), the log on a real Kafka broker, K
simulated nodes; then one host cut off in the middle of a job. And the capacity model,
fitted on the smallest fleet of the run and checked against the larger ones.

    python bench/hosts.py [--hosts 3] [--sizes 20000,40000,60000] [--interval 1.0]
                          [--window-s 20] [--jobs 2] [--per-sim 20000] [--no-cut]

Per size K: all online after (s), false offline over the window (must be 0), heartbeat
lag p50/p99, CPU per process (leader, each edge, simulators), RSS, ``true`` on every
node (voting done / complete); then, unless ``--no-cut``, a job during which host 0's link
goes down one second in: when its nodes were all online again through the other edges,
the job's end, and each node's runs (the simulators' own count must equal K: nobody ran
twice). The same-run baseline is the smallest sizes: the model (``bench/capacity.py``)
takes its per-heartbeat and per-node-job costs from the two smallest (a line through
them: a slope and a fixed part) and predicts the larger sizes' CPU and job time; each
prediction is printed against what was measured (the goal: within 25 %). Needs root
(namespaces), Java and the Kafka jars (``python -m pushjobs.testbed.kafkabroker fetch``).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from capacity import Costs, predict
from fleet import cpu_s, heartbeat_window, info, memory_mib, run_job, wait_online
from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.api.client import ApiClient
from pushjobs.testbed import netns
from pushjobs.testbed.kafkabroker import KafkaCluster
from pushjobs.testbed.sandbox import Proc, Sandbox

CORES = 2


def sim_stats(sim: Proc) -> dict[str, Any]:
    sim.send_line("stats")
    while True:
        line = sim.read_line(30.0)
        if line.startswith("{"):
            stats: dict[str, Any] = orjson.loads(line)
            return stats


def succeeded(sims: list[Proc]) -> int:
    return sum(int(sim_stats(s)["counters"].get("jobs_succeeded", 0)) for s in sims)


def cut_mid_job(
    client: ApiClient, k: int, host: netns.TestHost, edge: str, sims: list[Proc]
) -> dict[str, Any]:
    """A job of ``true`` on every node, host 0 cut off a second in."""
    runs_before = succeeded(sims)
    on_it = next(e for e in info(client)["edges"] if e["edge"] == edge)["online"]
    job = client.call("job.start", {"command": "true", "nodes": ["sim-*"], "quorum": "100%"})
    job_id = job["job"]["job_id"]
    started = time.monotonic()
    time.sleep(1.0)  # the job is under way (a fleet's commits take seconds to go out)
    host.cut()
    cut_at = time.monotonic()
    rehomed_s = math.nan
    while time.monotonic() - cut_at < 180:
        now = info(client)
        others = sum(e["online"] for e in now["edges"] if e["edge"] != edge and e["live"])
        if others >= k:
            rehomed_s = time.monotonic() - cut_at
            break
        time.sleep(0.2)
    state = client.call("job.status", {"job_id": job_id})["job"]
    while state["state"] not in ("complete", "quorum_failed", "aborted", "timed_out", "failed"):
        time.sleep(0.5)
        state = client.call("job.status", {"job_id": job_id})["job"]
    ran = succeeded(sims) - runs_before
    host.join()
    return {
        "nodes_on_cut_host": on_it,
        "rehomed_s": rehomed_s,
        "state": state["state"],
        "summary": state["summary"],
        "job_s": time.monotonic() - started,
        "runs": ran,
        "each_once": ran == k and state["summary"].get("succeeded") == k,
    }


def one_size(k: int, args: argparse.Namespace, hosts: list[netns.TestHost], kafka: KafkaCluster):
    root = Path(tempfile.mkdtemp(prefix=f"pushjobs-hosts-{k}-"))
    near = hosts[0].near
    log = {
        "backend": "kafka",
        "bootstrap_servers": kafka.bootstrap,
        "topic_prefix": f"b{uuid.uuid4().hex[:6]}.",
    }
    sandbox = Sandbox(
        root,
        nodes=[],
        interval_s=args.interval,
        offline_threshold=3,
        online_threshold=2,
        server_extra={
            "server": {
                "registry_check_s": 2.0,
                "leader_session_s": 5.0,
                "edges": 0,
                "edge_bind": f"tcp://{near}:0",
            },
            "jobs": {"vote_timeout_s": 60.0, "run_timeout_s": 120.0, "max_nodes": 1_000_000},
            "log": log,
        },
    )
    out: dict[str, Any] = {"nodes": k}
    with sandbox:
        sandbox.prepare()
        server = sandbox.start_server(timeout_s=90)
        names = [f"host{h.index}" for h in hosts]
        for host, name in zip(hosts, names, strict=True):
            sandbox.start_edge(name, prefix=host.argv(), bind_host=host.far, timeout_s=90)
        client = ApiClient.from_files(
            sandbox.api, root / "keys" / "server.pub", root / "keys" / "admin.key", timeout_s=60
        )
        while sum(e["live"] for e in info(client)["edges"]) < len(hosts):
            time.sleep(0.2)
        procs = max(1, math.ceil(k / args.per_sim))
        share = math.ceil(k / procs)
        started = time.monotonic()
        sims = []
        for p in range(procs):
            first, count = p * share, min(share, k - p * share)
            # Bound where every test host reaches this machine: the edges send commands.
            sims.append(
                sandbox.start_simulator(
                    f"sim{p}",
                    count,
                    first=first,
                    args=["--bind", f"tcp://{near}:*", "--splay", str(args.splay)],
                )
            )
        for sim in sims:
            sim.read_line(300)
        wait_online(client, k, 600)
        out["all_online_s"] = time.monotonic() - started
        print(f"  {k} nodes online after {out['all_online_s']:.1f} s", flush=True)
        time.sleep(args.settle_s)
        out["heartbeat"] = heartbeat_window(client, server.pid, sims, args.window_s)
        edges = info(client)["edges"]
        out["edge_online"] = {e["edge"]: e["online"] for e in edges}
        print(f"  heartbeat: {orjson.dumps(out['heartbeat']).decode()}", flush=True)
        pids = {"leader": server.pid, **{e["edge"]: e["pid"] for e in edges}}
        sim_pids = [s.pid for s in sims]
        jobs = []
        for _ in range(args.jobs):
            cpu0 = {n: cpu_s(p) for n, p in pids.items()}
            sim0 = sum(cpu_s(p) for p in sim_pids)
            job = run_job(client, k)
            job["cpu_s"] = {n: cpu_s(p) - cpu0[n] for n, p in pids.items()}
            job["cpu_s"]["simulators"] = sum(cpu_s(p) for p in sim_pids) - sim0
            jobs.append(job)
            print(
                f"  job: {job['state']} {job['summary']} voting {job['voting_done_s']:.2f} s,"
                f" complete {job['complete_s']:.2f} s, cpu "
                + ", ".join(f"{n} {v:.2f}" for n, v in job["cpu_s"].items()),
                flush=True,
            )
        out["jobs"] = jobs
        out["rss_mib"] = {n: memory_mib(p)[0] for n, p in pids.items()}
        if not args.no_cut:
            out["cut"] = cut_mid_job(client, k, hosts[0], names[0], sims)
            print(f"  cut: {orjson.dumps(out['cut']).decode()}", flush=True)
        client.close()
    return out


def steady(r: dict[str, Any], who: str) -> float:
    """``who``'s CPU between jobs, in cores (the heartbeats, the polls)."""
    per = r["heartbeat"]["cpu_pct_per_process"]
    if who == "leader":
        return float(per[0]) / 100
    if who == "edges":
        return float(sum(per[1:])) / 100
    return float(r["heartbeat"]["sim_cpu_pct"]) / 100


def per_job(result: dict[str, Any], who: str) -> float:
    """``who``'s CPU for a job, net of what it spends on heartbeats meanwhile (the
    counters run over the whole job: its heartbeats are the steady part's)."""
    jobs = result["jobs"]
    total = 0.0
    for j in jobs:
        if who == "edges":
            spent = sum(v for n, v in j["cpu_s"].items() if n.startswith("host"))
        else:
            spent = j["cpu_s"][who]
        total += max(0.0, spent - steady(result, who) * j["client_wall_s"])
    return total / len(jobs)


def fit(a: dict[str, Any], b: dict[str, Any], hosts: int, interval_s: float) -> Costs:
    """The model's costs from two sizes of the run: each cost a line through the two
    (a slope per heartbeat or node, what is left a fixed part), the job's time calibrated
    on the smaller."""
    ka, kb = a["nodes"], b["nodes"]
    ra, rb = a["heartbeat"]["heartbeats_per_s"], b["heartbeat"]["heartbeats_per_s"]

    def slope(ya: float, yb: float, xa: float, xb: float) -> float:
        return max(0.0, (yb - ya) / (xb - xa))

    edge_hb = slope(steady(a, "edges"), steady(b, "edges"), ra, rb)
    costs = Costs(
        edge_per_heartbeat_s=edge_hb,
        leader_per_heartbeat_s=slope(steady(a, "leader"), steady(b, "leader"), ra, rb),
        sim_per_heartbeat_s=slope(steady(a, "sims"), steady(b, "sims"), ra, rb),
        leader_per_node_job_s=slope(per_job(a, "leader"), per_job(b, "leader"), ka, kb),
        edge_per_node_job_s=slope(per_job(a, "edges"), per_job(b, "edges"), ka, kb),
        sim_per_node_job_s=slope(per_job(a, "simulators"), per_job(b, "simulators"), ka, kb),
        bytes_per_node=(sum(b["rss_mib"].values()) - sum(a["rss_mib"].values()))
        * 2**20
        / (kb - ka),
        interval_s=interval_s,
        edge_fixed_cpu=max(0.0, (steady(a, "edges") - ra * edge_hb) / hosts),
        job_fixed_s=0.0,
    )
    measured = min(j["complete_s"] for j in a["jobs"])
    modelled = predict(costs, ka, edges=hosts, cores=CORES).job_s
    return replace(costs, job_fixed_s=max(0.0, measured - modelled))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--sizes", default="20000,40000,60000")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--per-sim", type=int, default=20_000)
    parser.add_argument("--no-cut", action="store_true", help="skip the host cut off mid-job")
    parser.add_argument(
        "--splay", type=float, default=3.0, help="simulated nodes' rediscovery splay (s)"
    )
    args = parser.parse_args()
    why = netns.unavailable()
    if why is not None:
        raise SystemExit(f"no test hosts here: {why}")
    # Stopped (SIGTERM), it still removes its test hosts and stops what it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    sizes = [int(s) for s in args.sizes.split(",")]
    print(describe())
    print(f"{args.hosts} test hosts, one edge each; sizes {sizes}; {args.interval:g} s heartbeats")
    hosts = [netns.make(i) for i in range(args.hosts)]
    results = []
    try:
        with KafkaCluster(
            Path(tempfile.mkdtemp(prefix="pushjobs-hosts-kafka-")), host=hosts[0].near
        ) as kafka:
            for k in sizes:
                print(f"\n== {k} nodes", flush=True)
                results.append(one_size(k, args, hosts, kafka))
    finally:
        for host in hosts:
            host.remove()

    print(
        "\n     K  online  false  lag p99  leader%  edges%  sims%  RSS MiB   vote s   done s"
        "  cut: rehomed s, job, once"
    )
    for r in results:
        hb, jobs = r["heartbeat"], r["jobs"]
        per = hb["cpu_pct_per_process"]
        vote = min(j["voting_done_s"] for j in jobs)
        done = min(j["complete_s"] for j in jobs)
        cut = r.get("cut")
        cut_text = f"{cut['rehomed_s']:.1f}, {cut['state']}, {cut['each_once']}" if cut else "-"
        print(
            f"{r['nodes']:6d} {r['all_online_s']:6.0f}s {hb['false_offline']:6d}"
            f" {hb['lag_p99_ms']:7.0f}  {per[0]:7.1f} {sum(per[1:]):7.1f} {hb['sim_cpu_pct']:6.1f}"
            f" {sum(r['rss_mib'].values()):8.0f} {vote:8.2f} {done:8.2f}  {cut_text}"
        )

    if len(results) < 3:
        print("\n(the model needs three sizes: fitted on two, checked on the rest)")
        return
    base = fit(results[0], results[1], args.hosts, args.interval)
    print(
        f"\nmodel fitted on {results[0]['nodes']:,} and {results[1]['nodes']:,} nodes "
        f"(the same-run baseline): {base}, job fixed {base.job_fixed_s:.2f} s"
    )
    print("     K   edges% predicted/measured   job s predicted/measured")
    worst = 0.0
    for r in results[2:]:
        k = r["nodes"]
        p = predict(base, k, edges=args.hosts, cores=CORES)
        hb = r["heartbeat"]
        measured_edges = sum(hb["cpu_pct_per_process"][1:])
        measured_job = min(j["complete_s"] for j in r["jobs"])
        e1 = abs(p.edges_cpu_pct - measured_edges) / measured_edges
        e2 = abs(p.job_s - measured_job) / measured_job
        worst = max(worst, e1, e2)
        print(
            f"{k:6d}   {p.edges_cpu_pct:7.1f} / {measured_edges:7.1f} ({e1:+.0%})"
            f"   {p.job_s:7.2f} / {measured_job:7.2f} ({e2:+.0%})"
        )
    print(f"worst error {worst:.0%} (goal: within 25 %)")


if __name__ == "__main__":
    main()
