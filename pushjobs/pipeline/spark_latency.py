"""Latency percentiles and stragglers on Spark: the definitions of ``metrics.py``.

Two forms of the window's latency samples, each cached once:

- *lists*: per (metric, command, node) the node's values as one sorted array. A node's
  percentiles (merged over its commands) and a straggler's (per command) are read off
  the array by position, exactly as ``metrics.percentile`` interpolates. A rollup keeps
  each day's lists (``rollup.py``), so a month of them is a few rows per node, not a row
  per sample. Measured at 100M events (a month of 10,000 nodes) from rollups: the node
  percentiles and stragglers took 9 s this way against 63 s by Spark's ``percentile``
  over counted values (which keeps a map of boxed values per group; samples rarely
  repeat within a node, so counting them saved little), with identical results;
- *counted*: per (metric, command) each distinct value and its count, for the fleet's and
  each command's percentiles (Spark's exact ``percentile`` weighs each value by its
  count; merged over nodes, values repeat: a fourteenth of the rows at 10M events).

Also measured and not taken: an exact percentile by window functions (sort, running
count) cost more than ``percentile`` over counted values; ``percentile_approx`` over the
raw samples (accuracy 100000) was up to 1.6 % off with no bound on the value (its bound is
on the rank), where ``--approx`` rounds the values and so stays within 0.5 %.
"""

from __future__ import annotations

from typing import Any

from pushjobs.pipeline.metrics import BOX_QUANTILES, FLEET, METRICS, QUANTILES

# The metric of a latency sample, as an index into METRICS: a byte groups and hashes
# faster than the name (10M events: the value counts took 12 % less CPU).
VOTE, RUN = METRICS.index("commit_to_ack"), METRICS.index("run_to_finish")


def samples(F: Any, states: Any) -> Any:
    """The latency samples of ``states`` (``spark_job._node_states``): (metric, command,
    node, ms), the metric ``VOTE`` or ``RUN``."""
    return states.where(F.col("metric").isNotNull()).select("metric", "command", "node", "ms")


def lists(F: Any, rows: Any, approx: bool) -> Any:
    """``samples`` as lists: (metric, command, node, ms), ``ms`` an array of values."""
    return rows.groupBy("metric", "command", "node").agg(
        F.collect_list(_rounded(F, F.col("ms"), approx)).alias("ms")
    )


def rolled_lists(F: Any, table: Any, approx: bool) -> Any:
    """A rollup's lists of samples (``rollup.py``) as ``lists`` gives them."""
    ms = F.col("ms")
    return table.select(
        F.col("metric").cast("byte").alias("metric"),
        "command",
        "node",
        F.transform(ms, lambda x: _rounded(F, x, approx)).alias("ms") if approx else ms,
    )


def merged_lists(F: Any, lists: Any, *keys: str) -> Any:
    """``lists`` merged per ``keys``, each list sorted: what the percentiles read."""
    return lists.groupBy(*keys).agg(F.sort_array(F.flatten(F.collect_list("ms"))).alias("ms"))


def counted(F: Any, rows: Any, approx: bool) -> Any:
    """``samples`` merged over nodes and counted: (metric, command, ms, cnt). Each
    distinct value once: the fleet's and each command's percentiles cost per distinct
    value."""
    return rows.groupBy("metric", "command", _rounded(F, F.col("ms"), approx).alias("ms")).agg(
        F.count(F.lit(1)).alias("cnt")
    )


def counted_lists(F: Any, lists: Any) -> Any:
    """``lists`` counted as ``counted`` counts samples (rounded already)."""
    values = lists.select("metric", "command", F.explode("ms").alias("ms"))
    return values.groupBy("metric", "command", "ms").agg(F.count(F.lit(1)).alias("cnt"))


def rounded_counts(F: Any, table: Any, approx: bool) -> Any:
    """A rollup's counted samples (``rollup.py``) as ``counted`` gives them."""
    return table.select(
        F.col("metric").cast("byte").alias("metric"),
        "command",
        _rounded(F, F.col("ms"), approx).cast("long").alias("ms"),
        F.col("cnt").cast("long").alias("cnt"),
    )


def _rounded(F: Any, ms: Any, approx: bool) -> Any:
    """``ms``, or with ``approx`` rounded to three significant digits (below 1 s: as is):
    each value, and so each percentile, moves by at most 0.5 %."""
    if not approx:
        return ms
    scale = F.pow(F.lit(10.0), F.floor(F.log10(ms)) - 2)
    return F.when(ms >= 1000, (F.round(ms / scale) * scale).cast("long")).otherwise(ms)


def _at(F: Any, values: Any, qs: tuple[float, ...]) -> Any:
    """Exact percentiles of a sorted array, as ``metrics.percentile`` takes them: linear
    interpolation at ``q * (n - 1)``, in the same arithmetic."""
    n = F.size(values)
    out = []
    for q in qs:
        pos = F.lit(q) * (n - 1)
        lo = F.floor(pos)
        low = F.element_at(values, (lo + 1).cast("int")).cast("double")
        high = F.element_at(values, (F.least(lo + 1, n - 1) + 1).cast("int")).cast("double")
        out.append(low + (high - low) * (pos - lo))
    return F.array(*out)


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


def latency(F: Any, lists: Any, commands: Any) -> list[dict[str, Any]]:
    """Per node from ``lists`` (``merged_lists`` per metric, command and node); the
    fleet's from ``commands`` (``per_command``)."""
    # The fleet's values merged over commands and nodes: the same samples in a fourteenth
    # of the rows (10M events), and percentiles cost per distinct value.
    q = _quantiles(F, QUANTILES)
    fleet = _merged(F, commands, "metric").groupBy("metric").agg(F.sum("cnt").alias("count"), q)
    per_node = merged_lists(F, lists, "metric", "node")
    nodes = per_node.select(
        "metric", "node", F.size("ms").alias("count"), _at(F, F.col("ms"), QUANTILES).alias("q")
    )
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
    lists: Any,
    by_command: list[dict[str, Any]],
    *,
    factor: float,
    min_samples: int,
) -> list[dict[str, Any]]:
    """Nodes whose median run of a command is over ``factor`` times the command's median,
    from ``lists`` (``merged_lists`` per metric, command and node: sorted already)."""
    medians = {r["command"]: r["p50"] for r in by_command if r["metric"] == "run_to_finish"}
    if not medians:
        return []
    spark = lists.sparkSession
    limits = spark.createDataFrame(
        [(c, factor * m) for c, m in medians.items()], "command string, limit double"
    )
    runs = F.size("ms")
    rows = (
        lists.where((F.col("metric") == RUN) & (runs >= min_samples))
        .join(F.broadcast(limits), "command")
        .select(
            "command",
            "node",
            "limit",
            runs.alias("runs"),
            _at(F, F.col("ms"), (0.5, 0.95)).alias("q"),
        )
        .where(F.col("q")[0] > F.col("limit"))
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
