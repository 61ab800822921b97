"""A report's outputs: CSV and Parquet tables worst first, the summary, charts and page.

Every table is written in full, ordered so that what needs attention comes first (lowest
availability, most failures, slowest). Times are UTC throughout. Charts are in
``charts.py``, the HTML page in ``page.py``; this module only arranges the tables.
"""

from __future__ import annotations

import csv
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from pushjobs.pipeline.metrics import ANSWERED, COUNTED, FAILURES, FLEET, HALTED, Report


def pct_text(pct: float) -> str:
    """Two decimals, three near 100: a minute down in a week is 99.990 %, not 100.00 %."""
    return f"{pct:.3f}%" if 99.99 < pct < 100 else f"{pct:.2f}%"


def _failure_pct(row: dict[str, Any]) -> float | None:
    """Failures among the nodes that answered: a node a halted batch job skipped never ran,
    one unavailable was never asked."""
    ran = sum(row[k] for k in ANSWERED)
    return 100.0 * sum(row[k] for k in FAILURES) / ran if ran else None


def _last(value: float | None) -> float:
    """A sort key that puts a missing figure after every real one."""
    return math.inf if value is None or math.isnan(value) else value


def presented(report: Report) -> dict[str, list[dict[str, Any]]]:
    """The report's tables, worst first, with failure rates in % and times in UTC."""
    t = report.tables()
    availability = sorted(
        t["availability"],
        key=lambda r: (_last(r["availability_pct"]), -r["offline_ms"], r["node"]),
    )
    outcomes = [r | {"failure_pct": _failure_pct(r)} for r in t["outcomes"]]
    by_command = [r | {"failure_pct": _failure_pct(r)} for r in t["outcomes_by_command"]]
    fail_first = lambda r: (-(r["failure_pct"] or 0.0), r["command"], r.get("node", ""))  # noqa: E731
    latency = sorted(
        t["latency"], key=lambda r: (r["metric"], r["scope"] != FLEET, -_nan0(r["p95"]))
    )
    return {
        "availability": availability,
        "outcomes": sorted(outcomes, key=fail_first),
        "outcomes_by_command": sorted(by_command, key=fail_first),
        "latency": latency,
        "latency_by_command": sorted(
            t["latency_by_command"], key=lambda r: (r["metric"], -_nan0(r["p95"]))
        ),
        "stragglers": sorted(t["stragglers"], key=lambda r: -(r["ratio"] or 0.0)),
        "downtime_by_day": sorted(
            t["downtime_by_day"], key=lambda r: (-r["offline_ms"], r["day"], r["node"])
        ),
        "outcomes_by_day": [
            r | {"failure_pct": 100.0 * r["failures"] / r["outcomes"] if r["outcomes"] else None}
            for r in t["outcomes_by_day"]
        ],
        "server_gaps": [
            {"start_utc": when(r["start_ms"]), "end_utc": when(r["end_ms"])}
            | {"minutes": (r["end_ms"] - r["start_ms"]) / 60_000}
            for r in t["server_gaps"]
        ],
    }


def _nan0(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def write_tables(report: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in presented(report).items():
        path = out / f"{name}.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            if rows:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        written.append(path)
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            continue
        pq.write_table(pa.Table.from_pylist(rows), out / f"{name}.parquet")
        written.append(out / f"{name}.parquet")
    summary = out / "summary.json"
    summary.write_bytes(orjson.dumps(summary_json(report), option=orjson.OPT_INDENT_2))
    written.append(summary)
    return written


def summary_json(report: Report) -> dict[str, Any]:
    avail = [
        r["availability_pct"] for r in report.availability if r["availability_pct"] is not None
    ]
    fleet = {r["metric"]: r for r in report.latency if r["scope"] == FLEET}
    return {
        "window_ms": [report.since, report.until],
        "window_utc": [when(report.since), when(report.until)],
        "events": report.events,
        "skipped": report.skipped,
        "nodes": len(report.availability),
        "mean_availability_pct": sum(avail) / len(avail) if avail else None,
        "flaps": sum(r["flaps"] for r in report.availability),
        "server_down_ms": sum(b - a for a, b in report.server_gaps),
        "jobs_by_command": {r["command"]: r["jobs"] for r in report.by_command},
        "latency_ms": {
            m: {k: r[k] for k in ("count", "p50", "p95", "p99")} for m, r in fleet.items()
        },
        "stragglers": sorted({r["node"] for r in report.stragglers}),
    }


def summary_text(report: Report) -> str:
    """The summary for a terminal: counts grouped in thousands (a month of a big fleet
    runs to nine digits)."""
    s = summary_json(report)
    lines = [
        f"events {s['events']:,} in the window ({s['skipped']:,} skipped as malformed), "
        f"window {when(report.since)} .. {when(report.until)} UTC",
    ]
    if report.server_gaps:
        lines.append(
            f"server down {len(report.server_gaps)} times, {s['server_down_ms'] / 60_000:.1f} "
            "min in all (node state unknown then, left out of availability)"
        )
    if s["nodes"]:
        worst = presented(report)["availability"][:5]
        lines.append(
            f"nodes {s['nodes']:,}: mean availability {s['mean_availability_pct']:.2f}%, "
            f"{s['flaps']:,} flaps; lowest: "
            + ", ".join(
                f"{r['node']} {pct_text(r['availability_pct'])}"
                for r in worst
                if r["availability_pct"] is not None
            )
        )
    for r in presented(report)["outcomes_by_command"]:
        rate = "" if r["failure_pct"] is None else f" ({r['failure_pct']:.2f}% failed)"
        lines.append(
            f"command {r['command']}: {r['jobs']:,} jobs on {r['nodes']:,} nodes{rate}, "
            + ", ".join(f"{k} {r[k]:,}" for k in COUNTED if r[k])
            + (f"; jobs halted {r[HALTED]:,}" if r.get(HALTED) else "")
        )
    for metric, r in s["latency_ms"].items():
        lines.append(
            f"{metric}: p50 {r['p50']:,.0f} ms, p95 {r['p95']:,.0f} ms, p99 {r['p99']:,.0f} ms "
            f"({r['count']:,} samples)"
        )
    slow = presented(report)["stragglers"]
    lines.append(
        "stragglers (worst first): "
        + ", ".join(f"{r['node']} {r['command']} x{r['ratio']:.1f}" for r in slow[:10])
        + (f" ... ({len(slow):,} in all)" if len(slow) > 10 else "")
        if slow
        else "stragglers: none"
    )
    return "\n".join(lines)


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
