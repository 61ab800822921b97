"""A report's outputs: CSV and Parquet tables, PNG charts, one self-contained HTML page.

The HTML page embeds its charts (base64) and tables, so it can be mailed or archived as
one file. Charts need matplotlib (the ``spark`` extra); without it the tables are still
written and the page says the charts are missing.
"""

from __future__ import annotations

import base64
import csv
import html
import math
from pathlib import Path
from typing import Any

import orjson

from pushjobs.pipeline.metrics import FLEET, OUTCOMES, Report

HTML_ROWS = 50  # per table on the page; the CSV files have everything


def write_tables(report: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in report.tables().items():
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
        "events": report.events,
        "skipped": report.skipped,
        "nodes": len(report.availability),
        "mean_availability_pct": sum(avail) / len(avail) if avail else None,
        "flaps": sum(r["flaps"] for r in report.availability),
        "jobs_by_command": {r["command"]: r["jobs"] for r in report.by_command},
        "latency_ms": {
            m: {k: r[k] for k in ("count", "p50", "p95", "p99")} for m, r in fleet.items()
        },
        "stragglers": sorted({r["node"] for r in report.stragglers}),
    }


def summary_text(report: Report) -> str:
    s = summary_json(report)
    lines = [
        f"events {s['events']} ({s['skipped']} skipped as malformed), "
        f"window {_when(report.since)} .. {_when(report.until)}",
    ]
    if s["nodes"]:
        worst = sorted(
            (r for r in report.availability if r["availability_pct"] is not None),
            key=lambda r: r["availability_pct"],
        )[:5]
        lines.append(
            f"nodes {s['nodes']}: mean availability {s['mean_availability_pct']:.2f}%, "
            f"{s['flaps']} flaps; lowest: "
            + ", ".join(f"{r['node']} {r['availability_pct']:.1f}%" for r in worst)
        )
    for r in report.by_command:
        lines.append(
            f"command {r['command']}: {r['jobs']} jobs on {r['nodes']} nodes, "
            + ", ".join(f"{k} {r[k]}" for k in OUTCOMES if r[k])
        )
    for metric, r in s["latency_ms"].items():
        lines.append(
            f"{metric}: p50 {r['p50']:.0f} ms, p95 {r['p95']:.0f} ms, p99 {r['p99']:.0f} ms "
            f"({r['count']} samples)"
        )
    stragglers = s["stragglers"]
    lines.append(
        f"stragglers: {', '.join(stragglers[:10])}{' ...' if len(stragglers) > 10 else ''}"
        if stragglers
        else "stragglers: none"
    )
    return "\n".join(lines)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def charts(report: Report, out: Path) -> list[Path]:
    """PNG charts; [] when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out.mkdir(parents=True, exist_ok=True)
    made = []
    rows = [r for r in report.availability if r["availability_pct"] is not None]
    if rows:
        rows = sorted(rows, key=lambda r: r["availability_pct"])[:40]
        fig, ax = plt.subplots(figsize=(9, max(3, 0.22 * len(rows) + 1)))
        ax.barh([r["node"] for r in rows], [r["availability_pct"] for r in rows], color="#3a7")
        ax.set(xlabel="availability %", title="Availability per node (lowest 40)", xlim=(0, 100))
        made.append(_save(fig, out / "availability.png"))
    latency = [r for r in report.latency if r["scope"] != FLEET]
    if latency:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for ax, metric in zip(axes, ("commit_to_ack", "run_to_finish"), strict=True):
            values = [r["p95"] for r in latency if r["metric"] == metric]
            medians = [r["p50"] for r in latency if r["metric"] == metric]
            if values:
                ax.hist([medians, values], bins=30, label=["node p50", "node p95"])
                ax.legend()
            ax.set(title=f"{metric} per node", xlabel="ms", ylabel="nodes")
        made.append(_save(fig, out / "latency.png"))
    if report.by_command:
        fig, ax = plt.subplots(figsize=(9, 4))
        names = [r["command"] for r in report.by_command]
        bottom = [0] * len(names)
        for outcome in OUTCOMES:
            values = [r[outcome] for r in report.by_command]
            ax.bar(names, values, bottom=bottom, label=outcome)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set(title="Node outcomes per command", ylabel="node runs")
        ax.legend()
        made.append(_save(fig, out / "outcomes.png"))
    return made


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_html(report: Report, out: Path, pngs: list[Path]) -> Path:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>pushjobs fleet report</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:2px 8px;font-size:13px}th{background:#eee}pre{background:#f6f6f6;"
        "padding:1em}</style></head><body>",
        "<h1>pushjobs fleet report</h1>",
        f"<pre>{html.escape(summary_text(report))}</pre>",
    ]
    if not pngs:
        parts.append("<p>(no charts: install matplotlib, part of pushjobs[spark])</p>")
    for png in pngs:
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f"<p><img alt='{png.stem}' src='data:image/png;base64,{data}'></p>")
    for name, rows in report.tables().items():
        parts.append(f"<h2>{html.escape(name)} ({len(rows)} rows)</h2>")
        if not rows:
            parts.append("<p>none</p>")
            continue
        head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row.values()) + "</tr>"
            for row in rows[:HTML_ROWS]
        )
        parts.append(f"<table><tr>{head}</tr>{body}</table>")
        if len(rows) > HTML_ROWS:
            parts.append(f"<p>first {HTML_ROWS} rows; all in {html.escape(name)}.csv</p>")
    parts.append("</body></html>")
    path = out / "report.html"
    path.write_text("".join(parts), encoding="utf-8")
    return path


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return "-" if value is None else str(value)
