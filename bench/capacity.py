"""The capacity model: how many edges, how much leader CPU and memory a fleet needs.

    python bench/capacity.py [--costs costs.json] [--target-util 0.5] [--job-s 5]

Costs are CPU seconds per heartbeat and per node of a job, for the leader, the edges and
(on a test machine only) the simulators, plus memory per node; the defaults are what
``bench/fleet.py``, ``bench/edge.py`` and ``bench/hosts.py`` measured on the 2-core
development VM (``--costs`` reads others: a ``Costs`` as JSON). The model is linear, as
the measurements are from 10,000 to 100,000 nodes (docs/benchmarks.md):

- heartbeats: K nodes at interval T send R = K/T a second; E edges spend E x
  ``edge_fixed_cpu`` plus R x ``edge_per_heartbeat_s`` cores on them, the leader R x
  ``leader_per_heartbeat_s`` (it hears only changes and edge reports: near nothing);
- a job on K nodes costs the leader K x ``leader_per_node_job_s`` on its one loop (its
  floor: nothing splits a job's coordination today) and each of E edges (K/E) x
  ``edge_per_node_job_s``; on a machine the simulators share, they cost theirs too, and
  the job takes at least its total CPU over the cores the steady heartbeats leave free,
  plus ``job_fixed_s`` of round trips;
- memory: K x ``bytes_per_node``, all processes together.

``predict`` gives a test machine's figures (``bench/hosts.py`` checks them against what it
measures); ``plan`` sizes a real deployment: edges so that heartbeats take at most
``target_util`` of each edge's core, and where the leader's own loop becomes the limit
(a job of K nodes needing more than ``job_s`` of its CPU): past that, job coordination
must be split by node shard, the way schedules are split by partition.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson


@dataclass(frozen=True, slots=True)
class Costs:
    edge_per_heartbeat_s: float = 14e-6
    """bench/edge.py, whole process, CurveZMQ, at saturation (paced: 22-26 us)."""
    leader_per_heartbeat_s: float = 0.1e-6
    """With edges the leader hears changes only: 0.5 % of a core at 50,000 a second."""
    sim_per_heartbeat_s: float = 10e-6
    leader_per_node_job_s: float = 70e-6
    """bench/fleet.py, 10,000 nodes, one edge: 0.69-0.72 s of leader CPU a job."""
    edge_per_node_job_s: float = 90e-6
    """The same: 0.89-0.97 s of edge CPU a job (commands sealed and sent, replies read)."""
    sim_per_node_job_s: float = 100e-6
    bytes_per_node: float = 9.5 * 1024
    """All server processes together, 100,000 nodes (9.3 KiB) to 50,000 (10.3 KiB)."""
    interval_s: float = 1.0
    """The heartbeat interval the costs were measured at."""
    edge_fixed_cpu: float = 0.07
    """What an edge costs with no heartbeat at all (its polls, reports, gathering waits),
    in cores: bench/hosts.py sees three edges at 7-8 % each from 5,000 to 10,000 nodes."""
    job_fixed_s: float = 0.4
    """A job's time that is not CPU: the vote's and the run's round trips, turns."""

    def __str__(self) -> str:
        us = {k: v * 1e6 for k, v in asdict(self).items() if k.endswith("_s") and k != "interval_s"}
        parts = [f"{k.removesuffix('_s')} {v:.1f} us" for k, v in us.items()]
        return ", ".join([*parts, f"{self.bytes_per_node / 1024:.1f} KiB a node"])


@dataclass(frozen=True, slots=True)
class Prediction:
    heartbeats_per_s: float
    edges_cpu_pct: float  # all edges together, % of one core
    leader_cpu_pct: float
    sims_cpu_pct: float
    job_cpu_s: float  # leader + edges + simulators
    job_s: float  # the job's time on this machine, at best
    memory_mib: float


def predict(
    costs: Costs,
    k: int,
    *,
    edges: int,
    cores: int,
    interval_s: float | None = None,
    sims: bool = True,
) -> Prediction:
    """What K nodes cost a machine of ``cores`` running the leader, ``edges`` edges and
    (``sims``) the simulators playing the fleet."""
    rate = k / (interval_s or costs.interval_s)
    edges_cpu = edges * costs.edge_fixed_cpu + rate * costs.edge_per_heartbeat_s
    leader_cpu = rate * costs.leader_per_heartbeat_s
    sims_cpu = rate * costs.sim_per_heartbeat_s if sims else 0.0
    leader_job = k * costs.leader_per_node_job_s
    edge_job = k * costs.edge_per_node_job_s
    sim_job = k * costs.sim_per_node_job_s if sims else 0.0
    free = max(0.05, cores - edges_cpu - leader_cpu - sims_cpu)
    # The slowest of: all the job's CPU on the cores left, the leader's one loop, an edge's.
    job_s = costs.job_fixed_s + max(
        (leader_job + edge_job + sim_job) / free,
        leader_job / max(0.05, 1 - leader_cpu),
        edge_job / edges / max(0.05, 1 - edges_cpu / edges),
    )
    return Prediction(
        heartbeats_per_s=rate,
        edges_cpu_pct=100 * edges_cpu,
        leader_cpu_pct=100 * leader_cpu,
        sims_cpu_pct=100 * sims_cpu,
        job_cpu_s=leader_job + edge_job + sim_job,
        job_s=job_s,
        memory_mib=k * costs.bytes_per_node / 2**20,
    )


@dataclass(frozen=True, slots=True)
class Plan:
    nodes: int
    interval_s: float
    heartbeats_per_s: float
    edges: int
    leader_job_cpu_s: float  # the leader's loop per job on every node: its floor
    job_s: float  # with the edges planned, each on a core of its own
    memory_gib: float
    leader_limit: bool  # a job needs more than ``job_s`` of the leader's one loop


def plan(costs: Costs, k: int, interval_s: float, *, target_util: float, job_s: float) -> Plan:
    rate = k / interval_s
    # Enough edges for the heartbeats at ``target_util`` of a core each, and for a job's
    # fan-out to fit ``job_s`` in the rest of their cores.
    spare = 1 - min(0.95, target_util)
    for_beats = math.ceil(rate * costs.edge_per_heartbeat_s / target_util)
    for_jobs = math.ceil(k * costs.edge_per_node_job_s / (job_s * spare))
    edges = max(1, for_beats, for_jobs)
    leader_job = k * costs.leader_per_node_job_s
    edge_job = k / edges * costs.edge_per_node_job_s / spare
    return Plan(
        nodes=k,
        interval_s=interval_s,
        heartbeats_per_s=rate,
        edges=edges,
        leader_job_cpu_s=leader_job,
        job_s=max(leader_job, edge_job),
        memory_gib=k * costs.bytes_per_node / 2**30,
        leader_limit=leader_job > job_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, help="a Costs as JSON (default: the dev VM's)")
    parser.add_argument("--target-util", type=float, default=0.5)
    parser.add_argument("--job-s", type=float, default=5.0, help="a job's time to aim for")
    args = parser.parse_args()
    costs = Costs(**orjson.loads(args.costs.read_bytes())) if args.costs else Costs()
    print(f"costs: {costs}")
    print(
        f"edges sized for heartbeats at {args.target_util:.0%} of a core each and for a job "
        f"on every node in {args.job_s:g} s in the rest\n"
    )
    print(
        "     nodes  interval   heartbeats/s  edges  leader CPU/job  job s  memory GiB"
        "  leader the limit"
    )
    for k in (100_000, 1_000_000, 10_000_000):
        for interval in (1.0, 5.0, 30.0):
            p = plan(costs, k, interval, target_util=args.target_util, job_s=args.job_s)
            print(
                f"{k:10,d}  {interval:6.0f} s  {p.heartbeats_per_s:13,.0f}  {p.edges:5d}"
                f"  {p.leader_job_cpu_s:12.1f} s  {p.job_s:5.1f}  {p.memory_gib:10.1f}"
                f"  {'YES: split jobs by node shard' if p.leader_limit else 'no'}"
            )
    limit = args.job_s / costs.leader_per_node_job_s
    print(
        f"\nThe leader's loop is the limit past about {limit:,.0f} nodes a job "
        f"({args.job_s:g} s at {costs.leader_per_node_job_s * 1e6:.0f} us a node), "
        "whatever the heartbeat interval and the number of edges."
    )


if __name__ == "__main__":
    main()
