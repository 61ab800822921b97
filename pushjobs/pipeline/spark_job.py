"""The fleet report on Spark: the figures of ``metrics.py``, computed where the data is.

Every definition is the one ``metrics.py`` documents; tests hold both to the same
hand-computed answers. Only small results (one row per node, per command, per node and
metric) come back to the driver.
"""

from __future__ import annotations

from typing import Any

from pushjobs.pipeline import events
from pushjobs.pipeline.metrics import (
    FLEET,
    METRICS,
    OUTCOMES,
    RUN_ENDS,
    UNKNOWN_COMMAND,
    Report,
)


def schema() -> Any:
    from pyspark.sql import types as T

    kinds = {"int64": T.LongType(), "string": T.StringType()}
    return T.StructType(
        [T.StructField(name, kinds[kind], nullable=True) for name, kind in events.COLUMNS]
    )


def load(spark: Any, location: str) -> Any:
    """The archived events under ``location`` (partition directories ``date=...``)."""
    return spark.read.schema(schema()).option("mergeSchema", "false").parquet(location)


def usable(F: Any) -> Any:
    kind, node, job, state = F.col("kind"), F.col("node"), F.col("job_id"), F.col("state")

    def present(col: Any) -> Any:
        return col.isNotNull() & (col != "")

    return (
        F.col("ts").isNotNull()
        & kind.isin(*sorted(events.KINDS))
        & F.when(kind.isin("node_online", "node_offline"), present(node))
        .when(kind == "node_state", present(node) & present(job) & present(state))
        .when(kind == "job_state", present(job) & present(state))
        .otherwise(F.lit(True))
    )


def compute(
    df: Any,
    *,
    since: int | None = None,
    until: int | None = None,
    straggler_factor: float = 2.0,
) -> Report:
    from pyspark.sql import functions as F

    total = df.count()
    good = df.where(usable(F)).select(
        "offset", "ts", "kind", "job_id", "node", "state", "prev_state", "command"
    )
    good = good.cache()
    used = good.count()
    report = Report(since, until, events=total, skipped=total - used)
    if used == 0:
        good.unpersist()
        return report
    if since is None or until is None:
        bounds = good.agg(F.min("ts").alias("lo"), F.max("ts").alias("hi")).first()
        since = bounds["lo"] if since is None else since
        until = bounds["hi"] if until is None else until
    report.since, report.until = since, until
    if until is None or since is None or until <= since:
        good.unpersist()
        return report
    try:
        report.availability = _availability(F, good, since, until)
        report.outcomes, report.by_command = _outcomes(F, good, since, until)
        samples = _samples(F, good, since, until).cache()
        report.latency = _latency(F, samples)
        report.stragglers = _stragglers(F, samples, straggler_factor)
        samples.unpersist()
    finally:
        good.unpersist()
    return report


def _availability(F: Any, good: Any, since: int, until: int) -> list[dict[str, Any]]:
    from pyspark.sql import Window

    live = good.where(
        F.col("kind").isin("node_online", "node_offline") & (F.col("ts") < until)
    ).select(
        "node",
        "ts",
        "offset",
        (F.col("kind") == "node_online").alias("online"),
    )
    order = Window.partitionBy("node").orderBy("ts", "offset")
    live = live.withColumn("end", F.coalesce(F.lead("ts").over(order), F.lit(until)))
    span = F.greatest(
        F.lit(0), F.least(F.col("end"), F.lit(until)) - F.greatest(F.col("ts"), F.lit(since))
    )
    live = live.withColumn("span", span)
    offline = ~F.col("online")
    rows = (
        live.groupBy("node")
        .agg(
            F.sum(F.when(F.col("online"), F.col("span")).otherwise(0)).alias("online_ms"),
            F.sum(F.when(offline, F.col("span")).otherwise(0)).alias("offline_ms"),
            F.sum(F.when(offline & (F.col("ts") >= since), 1).otherwise(0)).alias("flaps"),
            F.max(F.when(offline, F.col("span")).otherwise(0)).alias("longest_outage_ms"),
        )
        .collect()
    )
    out = []
    for r in sorted(rows, key=lambda r: r["node"]):
        known = r["online_ms"] + r["offline_ms"]
        out.append(
            {
                "node": r["node"],
                "online_ms": int(r["online_ms"]),
                "offline_ms": int(r["offline_ms"]),
                "availability_pct": 100.0 * r["online_ms"] / known if known else None,
                "flaps": int(r["flaps"]),
                "longest_outage_ms": int(r["longest_outage_ms"]),
            }
        )
    return out


def _node_states(F: Any, good: Any, since: int, until: int) -> Any:
    return good.where(
        (F.col("kind") == "node_state") & (F.col("ts") >= since) & (F.col("ts") < until)
    ).withColumn("command", F.coalesce(F.col("command"), F.lit(UNKNOWN_COMMAND)))


def _outcomes(
    F: Any, good: Any, since: int, until: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    states = _node_states(F, good, since, until)
    counts = [F.sum(F.when(F.col("state") == s, 1).otherwise(0)).alias(s) for s in OUTCOMES]
    per_node = states.groupBy("command", "node").agg(
        F.countDistinct("job_id").alias("jobs"), *counts
    )
    per_command = states.groupBy("command").agg(
        F.countDistinct("job_id").alias("jobs"), F.countDistinct("node").alias("nodes"), *counts
    )
    table = [
        {"command": r["command"], "node": r["node"], "jobs": r["jobs"]}
        | {s: int(r[s]) for s in OUTCOMES}
        for r in sorted(per_node.collect(), key=lambda r: (r["command"], r["node"]))
    ]
    by_command = [
        {"command": r["command"], "jobs": r["jobs"], "nodes": r["nodes"]}
        | {s: int(r[s]) for s in OUTCOMES}
        for r in sorted(per_command.collect(), key=lambda r: r["command"])
    ]
    return table, by_command


def _samples(F: Any, good: Any, since: int, until: int) -> Any:
    """One row per latency sample: (metric, node, ms)."""
    marks = (
        good.where((F.col("kind") == "job_state") & (F.col("ts") < until))
        .groupBy("job_id")
        .agg(
            F.min(F.when(F.col("state") == "voting", F.col("ts"))).alias("voting_ts"),
            F.min(F.when(F.col("state") == "running", F.col("ts"))).alias("running_ts"),
        )
    )
    states = _node_states(F, good, since, until).join(marks, "job_id", "inner")
    prev, state = F.col("prev_state"), F.col("state")
    vote = (prev == "new") & state.isin("ready", "nacked") & F.col("voting_ts").isNotNull()
    end = prev.isin("ready", "running") & state.isin(*RUN_ENDS) & F.col("running_ts").isNotNull()
    return states.select(
        "node",
        "command",
        F.when(vote, F.lit("commit_to_ack")).when(end, F.lit("run_to_finish")).alias("metric"),
        F.greatest(
            F.lit(0),
            F.when(vote, F.col("ts") - F.col("voting_ts")).otherwise(
                F.col("ts") - F.col("running_ts")
            ),
        ).alias("ms"),
    ).where(F.col("metric").isNotNull())


def _quantiles(F: Any) -> Any:
    # Exact, interpolating at q * (n - 1), like metrics.percentile.
    return F.expr("percentile(ms, array(0.5, 0.95, 0.99))").alias("q")


def _latency(F: Any, samples: Any) -> list[dict[str, Any]]:
    fleet = samples.groupBy("metric").agg(F.count("ms").alias("count"), _quantiles(F)).collect()
    nodes = (
        samples.groupBy("metric", "node").agg(F.count("ms").alias("count"), _quantiles(F)).collect()
    )
    by_metric: dict[str, list[dict[str, Any]]] = {m: [] for m in METRICS}
    for r in fleet:
        by_metric[r["metric"]].insert(0, _lat_row(r["metric"], FLEET, r["count"], r["q"]))
    for r in sorted(nodes, key=lambda r: r["node"]):
        by_metric[r["metric"]].append(_lat_row(r["metric"], r["node"], r["count"], r["q"]))
    return [row for m in METRICS for row in by_metric[m]]


def _lat_row(metric: str, scope: str, count: int, q: list[float]) -> dict[str, Any]:
    return {"metric": metric, "scope": scope, "count": int(count)} | {
        "p50": float(q[0]),
        "p95": float(q[1]),
        "p99": float(q[2]),
    }


def _stragglers(F: Any, samples: Any, factor: float) -> list[dict[str, Any]]:
    runs = samples.where(F.col("metric") == "run_to_finish")
    medians = runs.groupBy("command").agg(F.expr("percentile(ms, 0.5)").alias("median"))
    p95 = runs.groupBy("command", "node").agg(F.expr("percentile(ms, 0.95)").alias("p95"))
    rows = (
        p95.join(medians, "command").where(F.col("p95") > F.lit(factor) * F.col("median")).collect()
    )
    return [
        {
            "node": r["node"],
            "command": r["command"],
            "run_p95_ms": float(r["p95"]),
            "command_median_ms": float(r["median"]),
        }
        for r in sorted(rows, key=lambda r: (r["node"], r["command"]))
    ]
