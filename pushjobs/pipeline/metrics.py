"""What every report figure means, computed in one process: the reference. Pure.

The Spark job (``spark_job.py``) computes the same tables; tests hold both to hand-computed
answers and to each other. Times are ms since the epoch; the window is ``[since, until)``
(default: from the first to the last usable event). Events are taken in ``(ts, offset)``
order, whatever order they arrive in.

Per node (from ``node_online`` / ``node_offline`` events):

- a node's state holds from one liveness event to the next (the last one to ``until``);
  a state set *before* ``since`` counts from ``since``; before a node's first event its
  state is unknown and that time is left out;
- ``availability_pct`` = online time / (online + offline time) x 100, within the window;
- ``flaps`` = ``node_offline`` events in the window (the server records one only for a
  node that was online); ``longest_outage_ms`` = the longest offline stretch, clipped.

Per command and node (``node_state`` events in the window): ``jobs`` = distinct jobs,
then how many ended ``succeeded``, ``failed``, ``timed_out``, ``crashed``, ``nacked``.

Latencies (``node_state`` events in the window, against the job's ``job_state`` events):

- ``commit_to_ack``: from the job entering ``voting`` (commits sent) to a node's vote,
  ``new`` -> ``ready`` or ``nacked``;
- ``run_to_finish``: from the job entering ``running`` (runs sent) to a node's end,
  ``ready``/``running`` -> ``succeeded``, ``failed``, ``timed_out``, ``crashed`` or
  ``aborted``.

Percentiles interpolate linearly between the closest ranks (position ``q * (n - 1)``
in sorted order), as Spark's exact ``percentile`` does.

A *straggler* is a node whose ``run_to_finish`` p95 for a command is more than ``factor``
times the fleet median of ``run_to_finish`` for that same command. (Per command, because a
fleet runs ``uptime`` in 40 ms and backups in minutes: against one fleet-wide median every
node that ever ran a backup would look slow.) One row per (node, command) found slow.

Rows that cannot be used (no ``ts``, an unknown ``kind``, a ``node_state`` without job or
node) are counted in ``skipped`` and otherwise ignored.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pushjobs.pipeline.events import KINDS

OUTCOMES = ("succeeded", "failed", "timed_out", "crashed", "nacked")
RUN_ENDS = ("succeeded", "failed", "timed_out", "crashed", "aborted")
QUANTILES = (0.5, 0.95, 0.99)
METRICS = ("commit_to_ack", "run_to_finish")
FLEET = "(fleet)"
UNKNOWN_COMMAND = "(unknown)"


@dataclass(slots=True)
class Report:
    since: int | None
    until: int | None
    events: int = 0
    skipped: int = 0
    availability: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    by_command: list[dict[str, Any]] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "availability": self.availability,
            "outcomes": self.outcomes,
            "outcomes_by_command": self.by_command,
            "latency": self.latency,
            "stragglers": self.stragglers,
        }


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation at position ``q * (n - 1)``; NaN for no values."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def usable(row: Mapping[str, Any]) -> bool:
    kind = row.get("kind")
    if type(row.get("ts")) is not int or kind not in KINDS:
        return False
    if kind in ("node_online", "node_offline"):
        return bool(row.get("node"))
    if kind == "node_state":
        return bool(row.get("node")) and bool(row.get("job_id")) and bool(row.get("state"))
    if kind == "job_state":
        return bool(row.get("job_id")) and bool(row.get("state"))
    return True


class Event(NamedTuple):
    """An event as a compact tuple with interned strings: ten million of them must fit."""

    ts: int
    offset: int
    kind: str
    job: str
    node: str
    state: str
    prev: str
    cmd: str


def compute(
    rows: Iterable[Mapping[str, Any]],
    *,
    since: int | None = None,
    until: int | None = None,
    straggler_factor: float = 2.0,
) -> Report:
    good: list[Event] = []
    skipped = total = 0
    names: dict[str, str] = {}
    intern = names.setdefault
    for row in rows:
        total += 1
        if not usable(row):
            skipped += 1
            continue
        good.append(
            Event(
                row["ts"],
                row.get("offset") or 0,
                intern(row["kind"], row["kind"]),
                intern(v := row.get("job_id") or "", v),
                intern(v := row.get("node") or "", v),
                intern(v := row.get("state") or "", v),
                intern(v := row.get("prev_state") or "", v),
                intern(v := row.get("command") or UNKNOWN_COMMAND, v),
            )
        )
    good.sort()
    if good:
        since = good[0].ts if since is None else since
        until = good[-1].ts if until is None else until
    report = Report(since, until, events=total, skipped=skipped)
    if not good or since is None or until is None or until <= since:
        return report
    report.availability = _availability(good, since, until)
    report.outcomes, report.by_command = _outcomes(good, since, until)
    samples, runs = _latencies(good, since, until)
    report.latency = _latency_table(samples)
    report.stragglers = _stragglers(runs, straggler_factor)
    return report


def _availability(rows: list[Event], since: int, until: int) -> list[dict[str, Any]]:
    timeline: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    flaps: dict[str, int] = defaultdict(int)
    for r in rows:
        kind = r.kind
        if kind in ("node_online", "node_offline") and r.ts < until:
            timeline[r.node].append((r.ts, kind == "node_online"))
            if kind == "node_offline" and r.ts >= since:
                flaps[r.node] += 1
    out = []
    for node in sorted(timeline):
        points = timeline[node]
        online_ms = offline_ms = longest = 0
        for i, (start, online) in enumerate(points):
            end = points[i + 1][0] if i + 1 < len(points) else until
            span = max(0, min(end, until) - max(start, since))
            if online:
                online_ms += span
            else:
                offline_ms += span
                longest = max(longest, span)
        known = online_ms + offline_ms
        out.append(
            {
                "node": node,
                "online_ms": online_ms,
                "offline_ms": offline_ms,
                "availability_pct": 100.0 * online_ms / known if known else None,
                "flaps": flaps.get(node, 0),
                "longest_outage_ms": longest,
            }
        )
    return out


def _outcomes(
    rows: list[Event], since: int, until: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs: dict[tuple[str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for r in rows:
        if r.kind != "node_state" or not since <= r.ts < until:
            continue
        key = (r.cmd, r.node)
        jobs[key].add(r.job)
        if r.state in OUTCOMES:
            counts[key][r.state] += 1
    table: list[dict[str, Any]] = [
        {"command": c, "node": n, "jobs": len(jobs[(c, n)]), **counts[(c, n)]}
        for c, n in sorted(jobs)
    ]
    per_command: dict[str, dict[str, Any]] = {}
    command_jobs: dict[str, set[str]] = defaultdict(set)
    for (c, _), ids in jobs.items():
        command_jobs[c] |= ids
    for row in table:
        command: str = row["command"]
        agg = per_command.setdefault(
            command, {"command": command, "nodes": 0, **dict.fromkeys(OUTCOMES, 0)}
        )
        agg["nodes"] += 1
        for name in OUTCOMES:
            agg[name] += row[name]
    by_command = [
        {"command": c, "jobs": len(command_jobs[c]), **per_command[c]} for c in sorted(per_command)
    ]
    return table, by_command


def _latencies(
    rows: list[Event], since: int, until: int
) -> tuple[dict[str, dict[str, list[int]]], dict[tuple[str, str], list[int]]]:
    voting: dict[str, int] = {}
    running: dict[str, int] = {}
    for r in rows:
        if r.kind == "job_state" and r.ts < until:
            state = r.state
            marks = voting if state == "voting" else running if state == "running" else None
            if marks is not None and r.job not in marks:
                marks[r.job] = r.ts
    samples: dict[str, dict[str, list[int]]] = {m: defaultdict(list) for m in METRICS}
    runs: dict[tuple[str, str], list[int]] = defaultdict(list)  # (command, node)
    for r in rows:
        if r.kind != "node_state" or not since <= r.ts < until:
            continue
        job, state, prev, ts = r.job, r.state, r.prev, r.ts
        if prev == "new" and state in ("ready", "nacked") and job in voting:
            samples["commit_to_ack"][r.node].append(max(0, ts - voting[job]))
        elif prev in ("ready", "running") and state in RUN_ENDS and job in running:
            took = max(0, ts - running[job])
            samples["run_to_finish"][r.node].append(took)
            runs[(r.cmd, r.node)].append(took)
    return samples, runs


def _latency_table(samples: dict[str, dict[str, list[int]]]) -> list[dict[str, Any]]:
    out = []
    for metric in METRICS:
        per_node = samples[metric]
        everything = sorted(v for values in per_node.values() for v in values)
        scopes = [(FLEET, everything)] + [(n, sorted(per_node[n])) for n in sorted(per_node)]
        for scope, values in scopes:
            if not values:
                continue
            row: dict[str, Any] = {"metric": metric, "scope": scope, "count": len(values)}
            for q in QUANTILES:
                row[f"p{round(q * 100)}"] = percentile([float(v) for v in values], q)
            out.append(row)
    return out


def _stragglers(runs: dict[tuple[str, str], list[int]], factor: float) -> list[dict[str, Any]]:
    by_command: dict[str, list[float]] = defaultdict(list)
    for (command, _), values in runs.items():
        by_command[command] += [float(v) for v in values]
    medians = {c: percentile(sorted(v), 0.5) for c, v in by_command.items()}
    out = []
    for command, node in sorted(runs, key=lambda key: (key[1], key[0])):
        p95 = percentile(sorted(float(v) for v in runs[(command, node)]), 0.95)
        if p95 > factor * medians[command]:
            out.append(
                {
                    "node": node,
                    "command": command,
                    "run_p95_ms": p95,
                    "command_median_ms": medians[command],
                }
            )
    return out
