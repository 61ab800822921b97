"""What every report figure means, computed in one process: the reference. Pure.

The Spark job (``spark_job.py``) computes the same tables; tests hold both to hand-computed
answers and to each other. Times are ms since the epoch, UTC; the window is
``[since, until)``, by default from the first usable event to just after the last one (so
the last event counts). Events are taken in ``(ts, offset)`` order, whatever order they
arrive in. ``events`` counts the usable events in the window; ``skipped`` the rows that
cannot be used (no ``ts``, an unknown ``kind``, a ``node_state`` without job or node).

Availability, flaps, outages and server downtime: see ``uptime.py``.

Per command and node (``node_state`` events in the window): ``jobs`` = distinct jobs,
then how many ended ``succeeded``, ``failed``, ``timed_out``, ``crashed``, ``nacked``,
``aborted`` (the node let its commit go, or the job was aborted under it), ``skipped``
(a rolling-batch job halted before the node's turn: it never ran) and ``unavailable``
(never asked: offline at the job's start, given up at its ``--offline-wait`` deadline,
or not heard after a takeover); then ``late``: the nodes asked after waiting offline (an
``offline`` -> ``new`` event), which also end in one of the outcomes, in this window or a
later one. A node still ``waiting`` its turn, running, or waiting ``offline`` when the
window ends counts in ``jobs`` only. Per command also ``halted``: its jobs that ended
``halted`` in the window (a batch job that stopped starting nodes once its failure
budget was spent). Failure rates are of the nodes that answered (every outcome but
``skipped`` and ``unavailable``: neither was asked, or ran). A missing or empty command
is ``(unknown)``.

Latencies (``node_state`` events in the window, against the *marks* (when commits were
sent, when the job ran) from the UTC day before the window's first day on: a job or a
late node asked before that is not matched, which lets a report read only the days it
needs):

- ``commit_to_ack``: from the node's commit to its vote, ``new`` -> ``ready`` or
  ``nacked``. The commit is sent when the job enters ``voting`` (its ``job_state``
  event), or to a late node when it comes back (its own ``offline`` -> ``new`` for the
  job, which wins where there is one): a node that waited offline for 8 hours and acked
  in 30 ms took 30 ms, not 8 hours;
- ``run_to_finish``: a node's own run, to its end ``ready``/``running`` ->
  ``succeeded``, ``failed``, ``timed_out``, ``crashed`` or ``aborted``: the end event's
  ``duration_ms``, which the server measures from the job's runs, or for a rolling-batch
  job's node from its turn (so the time it waited for its turn is not latency); for an
  end event without it (older archives), from the job entering ``running``.

Percentiles interpolate linearly between the closest ranks (position ``q * (n - 1)``
in sorted order), as Spark's exact ``percentile`` does.

A *straggler* is a node whose median ``run_to_finish`` for a command, over at least
``min_samples`` runs, is more than ``factor`` times the fleet median of ``run_to_finish``
for that same command: a node that is slow run after run, not one with an unlucky tail.
(Per command, because a fleet runs ``uptime`` in 40 ms and backups in minutes: against
one fleet-wide median every node that ever ran a backup would look slow. The median,
because a healthy node's p95 sits near twice the median whenever run times vary by a
third, so a p95 rule flags healthy nodes by chance: 21 of 1900 at 1M demo events. A
minimum, because the median of three runs is three runs.) One row per (node, command)
found slow, with its ``runs``, its p50 and p95, and ``ratio`` (p50 / fleet median).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pushjobs.pipeline import uptime
from pushjobs.pipeline.events import KINDS
from pushjobs.pipeline.uptime import OFFLINE, ONLINE

OUTCOMES = (
    "succeeded",
    "failed",
    "timed_out",
    "crashed",
    "nacked",
    "aborted",
    "skipped",
    "unavailable",
)
NOT_ASKED = ("skipped", "unavailable")  # never asked, or never started: no answer
ANSWERED = tuple(s for s in OUTCOMES if s not in NOT_ASKED)  # the base of failure rates
LATE = "late"  # asked after waiting offline (``offline`` -> ``new``): not an outcome
COUNTED = (*OUTCOMES, LATE)  # the counts of the outcome tables, in their column order
HALTED = "halted"
RUN_ENDS = ("succeeded", "failed", "timed_out", "crashed", "aborted")
VOTED = ("ready", "nacked")  # a vote: new -> one of these
QUANTILES = (0.5, 0.95, 0.99)
BOX_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95, 0.99)  # latency_by_command: boxes and whiskers
FAILURES = ("failed", "timed_out", "crashed")
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
    latency_by_command: list[dict[str, Any]] = field(default_factory=list)
    downtime_by_day: list[dict[str, Any]] = field(default_factory=list)
    outcomes_by_day: list[dict[str, Any]] = field(default_factory=list)
    server_gaps: list[tuple[int, int]] = field(default_factory=list)
    """Server downtime within the window, ``[start, end)`` (see ``uptime.py``)."""

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "availability": self.availability,
            "outcomes": self.outcomes,
            "outcomes_by_command": self.by_command,
            "latency": self.latency,
            "latency_by_command": self.latency_by_command,
            "stragglers": self.stragglers,
            "downtime_by_day": self.downtime_by_day,
            "outcomes_by_day": self.outcomes_by_day,
            "server_gaps": [{"start_ms": a, "end_ms": b} for a, b in self.server_gaps],
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
    took: int | None  # duration_ms: a node's own run, on its end event


DAY_MS = 86_400_000
DEFAULT_GAP_MS = 60_000
DEFAULT_MIN_SAMPLES = 20


def is_late(prev: str | None, state: str | None) -> bool:
    """A node asked after waiting offline: its commit is sent now, not at the job's voting."""
    return prev == "offline" and state == "new"


def marks_from(since: int) -> int:
    """The earliest mark (a job's ``job_state``, a late node's ``offline`` -> ``new``) a
    window's latencies use: midnight UTC the day before."""
    return since - since % DAY_MS - DAY_MS


def compute(
    rows: Iterable[Mapping[str, Any]],
    *,
    since: int | None = None,
    until: int | None = None,
    straggler_factor: float = 2.0,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    server_gap_ms: int = DEFAULT_GAP_MS,
) -> Report:
    good: list[Event] = []
    skipped = 0
    names: dict[str, str] = {}
    intern = names.setdefault
    for row in rows:
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
                v if type(v := row.get("duration_ms")) is int else None,
            )
        )
    good.sort()
    if good:
        since = good[0].ts if since is None else since
        until = good[-1].ts + 1 if until is None else until
    report = Report(since, until, skipped=skipped)
    if not good or since is None or until is None or until <= since:
        return report
    report.events = sum(1 for r in good if since <= r.ts < until)
    before = [r for r in good if r.ts < until]
    live = [(r.ts, r.offset, r.kind, r.node) for r in before if r.kind in (ONLINE, OFFLINE)]
    again = uptime.reannouncements(live)
    gaps = uptime.server_gaps([r.ts for r in before], again, server_gap_ms) if again else []
    report.server_gaps = [
        (max(a, since), min(b, until)) for a, b in gaps if a < until and b > since
    ]
    report.availability, report.downtime_by_day = uptime.availability(live, since, until, gaps)
    report.outcomes, report.by_command = _outcomes(good, since, until)
    report.outcomes_by_day = _outcomes_by_day(good, since, until)
    samples, runs = _latencies(good, since, until)
    report.latency = _latency_table(samples)
    report.latency_by_command = _latency_by_command(runs, samples)
    report.stragglers = _stragglers(runs, straggler_factor, min_samples)
    return report


def _outcomes(
    rows: list[Event], since: int, until: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    jobs: dict[tuple[str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTED, 0))
    for r in rows:
        if r.kind != "node_state" or not since <= r.ts < until:
            continue
        key = (r.cmd, r.node)
        jobs[key].add(r.job)
        if r.state in OUTCOMES:
            counts[key][r.state] += 1
        elif is_late(r.prev, r.state):
            counts[key][LATE] += 1
    halted: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.kind == "job_state" and r.state == HALTED and since <= r.ts < until:
            halted[r.cmd].add(r.job)
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
            command, {"command": command, "nodes": 0, **dict.fromkeys(COUNTED, 0)}
        )
        agg["nodes"] += 1
        for name in COUNTED:
            agg[name] += row[name]
    by_command = [
        {"command": c, "jobs": len(command_jobs[c]), **per_command[c], HALTED: len(halted[c])}
        for c in sorted(per_command)
    ]
    return table, by_command


def _latencies(
    rows: list[Event], since: int, until: int
) -> tuple[dict[str, dict[str, list[int]]], dict[tuple[str, str], list[int]]]:
    voting: dict[str, int] = {}
    running: dict[str, int] = {}
    asked: dict[tuple[str, str], int] = {}  # (job, node): a late node's commit
    first = marks_from(since)
    for r in rows:
        if not first <= r.ts < until:
            continue
        if r.kind == "job_state":
            state = r.state
            marks = voting if state == "voting" else running if state == "running" else None
            if marks is not None and r.job not in marks:
                marks[r.job] = r.ts
        elif r.kind == "node_state" and is_late(r.prev, r.state):
            asked.setdefault((r.job, r.node), r.ts)
    samples: dict[str, dict[str, list[int]]] = {m: defaultdict(list) for m in METRICS}
    runs: dict[tuple[str, str], list[int]] = defaultdict(list)  # (command, node)
    votes: dict[str, list[int]] = defaultdict(list)  # command
    for r in rows:
        if r.kind != "node_state" or not since <= r.ts < until:
            continue
        job, state, prev, ts = r.job, r.state, r.prev, r.ts
        if prev == "new" and state in VOTED:
            sent = asked.get((job, r.node), voting.get(job))
            if sent is None:
                continue
            samples["commit_to_ack"][r.node].append(max(0, ts - sent))
            votes[r.cmd].append(max(0, ts - sent))
        elif prev in ("ready", "running") and state in RUN_ENDS:
            if r.took is not None:
                took = max(0, r.took)
            elif job in running:
                took = max(0, ts - running[job])
            else:
                continue
            samples["run_to_finish"][r.node].append(took)
            runs[(r.cmd, r.node)].append(took)
    samples[VOTES_BY_COMMAND] = votes
    return samples, runs


VOTES_BY_COMMAND = "commit_to_ack by command"


def _latency_by_command(
    runs: dict[tuple[str, str], list[int]], samples: dict[str, dict[str, list[int]]]
) -> list[dict[str, Any]]:
    per_command: dict[str, list[int]] = defaultdict(list)
    for (command, _), values in runs.items():
        per_command[command] += values
    out = []
    for metric, groups in (
        ("commit_to_ack", samples[VOTES_BY_COMMAND]),
        ("run_to_finish", per_command),
    ):
        for command in sorted(groups):
            ordered = sorted(float(v) for v in groups[command])
            row: dict[str, Any] = {"metric": metric, "command": command, "count": len(ordered)}
            for q in BOX_QUANTILES:
                row[f"p{round(q * 100)}"] = percentile(ordered, q)
            out.append(row)
    return out


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


def _stragglers(
    runs: dict[tuple[str, str], list[int]], factor: float, min_samples: int
) -> list[dict[str, Any]]:
    by_command: dict[str, list[float]] = defaultdict(list)
    for (command, _), values in runs.items():
        by_command[command] += [float(v) for v in values]
    medians = {c: percentile(sorted(v), 0.5) for c, v in by_command.items()}
    out = []
    for command, node in sorted(runs, key=lambda key: (key[1], key[0])):
        values = runs[(command, node)]
        if len(values) < min_samples:
            continue
        ordered = sorted(float(v) for v in values)
        p50, median = percentile(ordered, 0.5), medians[command]
        if p50 > factor * median:
            out.append(
                {
                    "node": node,
                    "command": command,
                    "runs": len(values),
                    "run_p50_ms": p50,
                    "run_p95_ms": percentile(ordered, 0.95),
                    "command_median_ms": median,
                    "ratio": p50 / median if median else None,
                }
            )
    return out


def _outcomes_by_day(rows: list[Event], since: int, until: int) -> list[dict[str, Any]]:
    """Per UTC day and command: node outcomes (the answers: ``ANSWERED``), and how many
    were failures."""
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r.kind == "node_state" and since <= r.ts < until and r.state in ANSWERED:
            c = counts[(r.ts - r.ts % DAY_MS, r.cmd)]
            c[0] += 1
            c[1] += r.state in FAILURES
    return [
        {"day": uptime.day_name(d), "command": cmd, "outcomes": n, "failures": f}
        for (d, cmd), (n, f) in sorted(counts.items())
    ]
