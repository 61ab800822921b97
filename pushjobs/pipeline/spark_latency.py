"""Latency percentiles and stragglers on Spark: the definitions of ``metrics.py``.

Every percentile table is taken from one cached aggregation of the latency samples to
(metric, command, node, value, count): Spark's exact ``percentile`` keeps a map of values
per group, and feeding it counted values instead of raw samples made it several times
faster, and exact. Measured on 10M events and not taken: an exact percentile by window
functions (sort, running count) cost nearly twice the CPU; ``percentile_approx`` over
the raw samples (accuracy 100000) cost about what ``--approx`` does, but was up to 1.6 %
off with no bound on the value (its bound is on the rank), where ``--approx`` rounds the
values and so stays within 0.5 % (0.45 % at worst there).
"""

from __future__ import annotations

from typing import Any

from pushjobs.pipeline.metrics import BOX_QUANTILES, FLEET, METRICS, QUANTILES

# The metric of a latency sample, as an index into METRICS: a byte groups and hashes
# faster than the name (10M events: the value counts took 12 % less CPU).
VOTE, RUN = METRICS.index("commit_to_ack"), METRICS.index("run_to_finish")


def value_counts(F: Any, states: Any, approx: bool) -> Any:
    """Latency samples as (metric, command, node, ms, cnt): each distinct value once; the
    metric is ``VOTE`` or ``RUN``.

    Exact percentiles weigh each value by its count, which is the same answer as the
    samples themselves at a fraction of the work. With ``approx`` values are rounded to
    three significant digits first (fewer distinct values): each value, and so each
    percentile, moves by at most 0.5 %.
    """
    return (
        states.where(F.col("metric").isNotNull())
        .groupBy("metric", "command", "node", _rounded(F, approx).alias("ms"))
        .agg(F.count(F.lit(1)).alias("cnt"))
    )


def _rounded(F: Any, approx: bool) -> Any:
    """``ms``, or with ``approx`` rounded to three significant digits (below 1 s: as is)."""
    ms = F.col("ms")
    if not approx:
        return ms
    scale = F.pow(F.lit(10.0), F.floor(F.log10(ms)) - 2)
    return F.when(ms >= 1000, (F.round(ms / scale) * scale).cast("long")).otherwise(ms)


def rounded_counts(F: Any, samples: Any, approx: bool, *keys: str) -> Any:
    """Counted samples of a rollup (``rollup.py``: per ``keys``) as ``value_counts`` (or
    ``per_command``) gives them."""
    return samples.select(
        F.col("metric").cast("byte").alias("metric"),
        *keys,
        _rounded(F, approx).cast("long").alias("ms"),
        F.col("cnt").cast("long").alias("cnt"),
    )


def _quantiles(F: Any, qs: tuple[float, ...]) -> Any:
    # Exact, interpolating at q * (n - 1) like metrics.percentile, each value weighed by
    # how many samples had it.
    values = ", ".join(str(q) for q in qs)
    return F.expr(f"percentile(ms, array({values}), cnt)").alias("q")


def _merged(F: Any, values: Any, *keys: str) -> Any:
    """``values`` counted again per ``keys`` and value (the other keys dropped)."""
    return values.groupBy(*keys, "ms").agg(F.sum("cnt").alias("cnt"))


def per_command(F: Any, values: Any) -> Any:
    """``values`` merged over nodes: (metric, command, ms, cnt), what the fleet's and each
    command's percentiles are taken from (a rollup keeps it per day: ``rollup.py``)."""
    return _merged(F, values, "metric", "command")


def latency(F: Any, values: Any, commands: Any) -> list[dict[str, Any]]:
    """Per node from ``values``; the fleet's from ``commands`` (``per_command``)."""
    q = _quantiles(F, QUANTILES)
    # The fleet's values merged over commands and nodes: the same samples in a fourteenth
    # of the rows (10M events), and percentiles cost per distinct value. A node's values
    # merged over its commands shrank by a twentieth only: not worth an extra pass.
    fleet = _merged(F, commands, "metric").groupBy("metric").agg(F.sum("cnt").alias("count"), q)
    nodes = values.groupBy("metric", "node").agg(F.sum("cnt").alias("count"), q)
    by_metric: dict[str, list[dict[str, Any]]] = {m: [] for m in METRICS}
    for r in fleet.collect():
        m = METRICS[r["metric"]]
        by_metric[m].insert(0, _lat_row(m, FLEET, r["count"], r["q"]))
    for r in sorted(nodes.collect(), key=lambda r: r["node"]):
        m = METRICS[r["metric"]]
        by_metric[m].append(_lat_row(m, r["node"], r["count"], r["q"]))
    return [row for m in METRICS for row in by_metric[m]]


def _lat_row(metric: str, scope: str, count: int, q: list[float]) -> dict[str, Any]:
    return {"metric": metric, "scope": scope, "count": int(count)} | {
        f"p{round(x * 100)}": float(v) for x, v in zip(QUANTILES, q, strict=True)
    }


def latency_by_command(F: Any, commands: Any) -> list[dict[str, Any]]:
    """From ``commands`` (``per_command``)."""
    q = _quantiles(F, BOX_QUANTILES)
    rows = commands.groupBy("metric", "command").agg(F.sum("cnt").alias("count"), q).collect()
    return [
        {"metric": METRICS[r["metric"]], "command": r["command"], "count": int(r["count"])}
        | {f"p{round(x * 100)}": float(v) for x, v in zip(BOX_QUANTILES, r["q"], strict=True)}
        for r in sorted(rows, key=lambda r: (r["metric"], r["command"]))
    ]


def stragglers(
    F: Any,
    values: Any,
    by_command: list[dict[str, Any]],
    *,
    factor: float,
    min_samples: int,
) -> list[dict[str, Any]]:
    """Nodes whose median run of a command is over ``factor`` times the command's median.

    Exact percentiles per (command, node) are the costliest aggregate of the report, and
    almost every pair is not slow: a cheap count first keeps the pairs that can be. A
    median over a threshold needs at least half the runs over it (``2 * above >= runs``,
    for odd and even counts alike); only those pairs get their percentiles computed.
    """
    medians = {r["command"]: r["p50"] for r in by_command if r["metric"] == "run_to_finish"}
    if not medians:
        return []
    spark = values.sparkSession
    limits = spark.createDataFrame(
        [(c, factor * m) for c, m in medians.items()], "command string, limit double"
    )
    runs = values.where(F.col("metric") == RUN).join(F.broadcast(limits), "command")
    suspects = (
        runs.groupBy("command", "node")
        .agg(
            F.sum("cnt").alias("runs"),
            F.sum(F.when(F.col("ms") > F.col("limit"), F.col("cnt")).otherwise(0)).alias("above"),
        )
        .where((F.col("runs") >= min_samples) & (2 * F.col("above") >= F.col("runs")))
        .select("command", "node")
    )
    rows = (
        runs.join(F.broadcast(suspects), ["command", "node"])
        .groupBy("command", "node")
        .agg(F.sum("cnt").alias("runs"), _quantiles(F, (0.5, 0.95)))
        .collect()
    )
    out = []
    for r in sorted(rows, key=lambda r: (r["node"], r["command"])):
        p50, median = float(r["q"][0]), medians[r["command"]]
        if p50 > factor * median:
            out.append(
                {
                    "node": r["node"],
                    "command": r["command"],
                    "runs": int(r["runs"]),
                    "run_p50_ms": p50,
                    "run_p95_ms": float(r["q"][1]),
                    "command_median_ms": median,
                    "ratio": p50 / median if median else None,
                }
            )
    return out
