"""PNG charts that answer an operator's questions, worst first; [] without matplotlib.

- which nodes were down longest (downtime in minutes, with availability to two decimals:
  99.0 % and 99.9 % are a day and a tenth of it, on a 0-100 axis both look full);
- when: downtime per node and UTC day (heatmap), failures per command and day;
- which commands fail (failure rate in %, per outcome);
- how long each command takes (box per command, log scale: 40 ms and 60 s side by side).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pushjobs.pipeline.metrics import ANSWERED, FAILURES, Report
from pushjobs.pipeline.output import pct_text

TOP = 30  # nodes on the per-node charts; the tables have all of them
FAILURE_COLOURS = {"failed": "#d62728", "timed_out": "#ff7f0e", "crashed": "#8c564b"}


def charts(report: Report, out: Path) -> list[Path]:
    """PNG charts in ``out``; [] when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        return []
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for name, draw in (
        ("downtime", _downtime),
        ("downtime_by_day", _heatmap),
        ("failures", _failure_rates),
        ("failures_by_day", _failures_by_day),
        ("latency", _latency),
    ):
        fig = draw(report)
        if fig is not None:
            made.append(_save(fig, out / f"{name}.png"))
    return made


def _plt() -> Any:
    import matplotlib.pyplot as plt

    return plt


def _downtime(report: Report) -> Any:
    rows = [r for r in report.availability if r["offline_ms"] > 0]
    rows = sorted(rows, key=lambda r: (-r["offline_ms"], r["node"]))[:TOP]
    if not rows:
        return None
    fig, ax = _plt().subplots(figsize=(10, max(3.0, 0.28 * len(rows) + 1.2)))
    minutes = [r["offline_ms"] / 60_000 for r in rows]
    ax.barh(range(len(rows)), minutes, color="#d62728")
    ax.set_yticks(range(len(rows)), [r["node"] for r in rows])
    ax.invert_yaxis()  # worst at the top
    for i, r in enumerate(rows):
        flaps = f"{r['flaps']} flap" + ("" if r["flaps"] == 1 else "s")
        label = f" {pct_text(r['availability_pct'])}  {flaps}"
        ax.text(minutes[i], i, label, va="center", fontsize=8)
    # log scale: a minute and a day of downtime both readable (99.99 % vs 99.0 % in a week)
    ax.set_xscale("log")
    ax.set_xlim(min(minutes) / 2, max(minutes) * 8)
    ax.set(
        xlabel="minutes offline in the window, log scale (label: availability, flaps)",
        title=f"Downtime per node: the {len(rows)} longest of {len(report.availability)} nodes",
    )
    return fig


def _heatmap(report: Report) -> Any:
    if not report.downtime_by_day or report.since is None or report.until is None:
        return None
    from pushjobs.pipeline.uptime import DAY_MS, day_name

    first = report.since - report.since % DAY_MS
    days = [day_name(d) for d in range(first, report.until, DAY_MS)]
    totals: dict[str, float] = defaultdict(float)
    for r in report.downtime_by_day:
        totals[r["node"]] += r["offline_ms"]
    nodes = sorted(totals, key=lambda n: (-totals[n], n))[:TOP]
    grid = [[0.0] * len(days) for _ in nodes]
    where = {n: i for i, n in enumerate(nodes)}
    col = {d: j for j, d in enumerate(days)}
    for r in report.downtime_by_day:
        if r["node"] in where and r["day"] in col:
            grid[where[r["node"]]][col[r["day"]]] = r["offline_ms"] / 60_000
    fig, ax = _plt().subplots(figsize=(max(6.0, 0.5 * len(days) + 3), 0.3 * len(nodes) + 1.8))
    from matplotlib.colors import LogNorm

    peak = max(max(row) for row in grid)
    masked = [[v if v > 0 else float("nan") for v in row] for row in grid]  # none: white
    norm = LogNorm(vmin=min(0.1, peak), vmax=max(peak, 0.2))
    image = ax.imshow(masked, aspect="auto", cmap="Reds", interpolation="nearest", norm=norm)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xticks(range(len(days)), [d[5:] for d in days], rotation=90)
    fig.colorbar(image, ax=ax, label="minutes offline (log scale; white: none)")
    ax.set(title="When nodes were down: minutes offline per UTC day (worst nodes)")
    return fig


def _failure_rates(report: Report) -> Any:
    rows = [r for r in report.by_command if sum(r[k] for k in (*FAILURES, "succeeded"))]
    if not rows:
        return None

    def pct(r: dict[str, Any], k: str) -> float:
        ran = sum(r[x] for x in ANSWERED)
        return 100.0 * r[k] / ran if ran else 0.0

    rows = sorted(rows, key=lambda r: -sum(pct(r, k) for k in FAILURES))
    fig, ax = _plt().subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    left = [0.0] * len(rows)
    for kind in FAILURES:
        values = [pct(r, kind) for r in rows]
        ax.barh(range(len(rows)), values, left=left, label=kind, color=FAILURE_COLOURS[kind])
        left = [a + b for a, b in zip(left, values, strict=True)]
    for i, r in enumerate(rows):
        ax.text(left[i], i, f" {left[i]:.2f}% of {r['jobs']} jobs' node runs", va="center")
    ax.set_yticks(range(len(rows)), [r["command"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, max([*left, 0.1]) * 1.5)
    ax.set(xlabel="% of node outcomes", title="Failure rate per command (worst first)")
    ax.legend(loc="lower right")
    return fig


def _failures_by_day(report: Report) -> Any:
    if not report.outcomes_by_day:
        return None
    days = sorted({r["day"] for r in report.outcomes_by_day})
    commands = sorted({r["command"] for r in report.outcomes_by_day})
    fig, (top, bottom) = _plt().subplots(2, 1, figsize=(11, 6), sharex=True)
    for command in commands:
        rows = {r["day"]: r for r in report.outcomes_by_day if r["command"] == command}
        fails = [rows[d]["failures"] if d in rows else 0 for d in days]
        rate = [
            100.0 * rows[d]["failures"] / rows[d]["outcomes"]
            if d in rows and rows[d]["outcomes"]
            else float("nan")
            for d in days
        ]
        top.plot(days, fails, marker="o", label=command)
        bottom.plot(days, rate, marker="o", label=command)
    top.set(ylabel="failed node runs", title="Failures per command and UTC day")
    bottom.set(ylabel="% of node runs failed")
    top.legend(fontsize=8)
    bottom.tick_params(axis="x", rotation=90)
    return fig


def _latency(report: Report) -> Any:
    rows = report.latency_by_command
    if not rows:
        return None
    metrics = ("commit_to_ack", "run_to_finish")
    fig, axes = _plt().subplots(1, 2, figsize=(12, max(3.0, 0.45 * len(rows) + 1.5)))
    for ax, metric in zip(axes, metrics, strict=True):
        mine = sorted((r for r in rows if r["metric"] == metric), key=lambda r: -r["p50"])
        stats = [
            {
                "label": f"{r['command']} ({r['count']})",
                "whislo": max(r["p5"], 0.5),
                "q1": max(r["p25"], 0.5),
                "med": max(r["p50"], 0.5),
                "q3": max(r["p75"], 0.5),
                "whishi": max(r["p95"], 0.5),
                "fliers": [max(r["p99"], 0.5)],
            }
            for r in mine
        ]
        if stats:
            ax.bxp(stats, orientation="horizontal", showfliers=True)
            ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set(
            xlabel="ms (log scale): box p25-p75, line p50, whiskers p5-p95, dot p99",
            title=f"{metric} per command (runs)",
        )
    return fig


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    _plt().close(fig)
    return path
