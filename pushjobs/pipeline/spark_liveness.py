"""Availability, flaps, outages and server gaps on Spark: the definitions of ``uptime.py``.

Liveness events are few (a node's comings and goings, not its jobs), so they are cached
once and every figure here is a small job over them; only the events near a
re-announcement are fetched from the full history, to place the server gaps exactly.
"""

from __future__ import annotations

from typing import Any

from pushjobs.pipeline import uptime
from pushjobs.pipeline.uptime import DAY_MS, OFFLINE, ONLINE


def server_gaps(F: Any, events: Any, live: Any, until: int, gap_ms: int) -> list[tuple[int, int]]:
    """The server gaps before ``until``; ``live`` has ``ts`` and ``again`` (re-announcement)."""
    again = sorted(r["ts"] for r in live.where(F.col("again")).select("ts").collect())
    if not again:
        return []
    ranges = uptime.near_reannouncements(again, gap_ms)
    ts = F.col("ts")
    before = events.where(ts < until)
    near = F.lit(False)
    for lo, hi in ranges:
        near = near | ts.between(lo, hi)
    points = [r["ts"] for r in before.where(near).select("ts").collect()]
    lasts = before.agg(
        *[F.max(F.when(ts < lo, ts)).alias(f"b{i}") for i, (lo, _) in enumerate(ranges)]
    ).first()
    points += [lasts[f"b{i}"] for i in range(len(ranges)) if lasts[f"b{i}"] is not None]
    return uptime.server_gaps(sorted(points), again, gap_ms)


def marked(F: Any, events: Any, until: int) -> Any:
    """Liveness events before ``until``, each with its span's end and whether it repeats."""
    from pyspark.sql import Window

    order = Window.partitionBy("node").orderBy("ts", "offset")
    kind = F.col("kind")
    prev = F.lag("kind").over(order)
    return (
        events.where(kind.isin(ONLINE, OFFLINE) & (F.col("ts") < until))
        .select("node", "ts", "offset", "kind")
        .withColumn("end", F.coalesce(F.lead("ts").over(order), F.lit(until)))
        .withColumn("again", (kind == ONLINE) & (prev == ONLINE))
        .withColumn("turn", (kind == OFFLINE) & (prev.isNull() | (prev != OFFLINE)))
        .withColumn("stretch", F.sum(F.col("turn").cast("long")).over(order))
    )


def _known(F: Any, lo: Any, hi: Any, gaps: list[tuple[int, int]]) -> Any:
    """Length of ``[lo, hi)`` less its overlap with the gaps (0 when empty)."""
    span = F.greatest(F.lit(0), hi - lo)
    for g0, g1 in gaps:
        span = span - F.greatest(F.lit(0), F.least(hi, F.lit(g1)) - F.greatest(lo, F.lit(g0)))
    return span


def availability(
    F: Any, live: Any, since: int, until: int, gaps: list[tuple[int, int]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lo = F.greatest(F.col("ts"), F.lit(since))
    hi = F.least(F.col("end"), F.lit(until))
    spans = live.withColumn("known", _known(F, lo, hi, gaps))
    offline = F.col("kind") == OFFLINE
    per_stretch = (
        spans.groupBy("node", "stretch")
        .agg(
            F.sum(F.when(~offline, F.col("known")).otherwise(0)).alias("on"),
            F.sum(F.when(offline, F.col("known")).otherwise(0)).alias("off"),
            F.sum((F.col("turn") & (F.col("ts") >= since)).cast("long")).alias("flaps"),
        )
        .groupBy("node")
        .agg(
            F.sum("on").alias("online_ms"),
            F.sum("off").alias("offline_ms"),
            F.sum("flaps").alias("flaps"),
            # stretch 0 is the online time before a node's first outage
            F.max(F.when(F.col("stretch") > 0, F.col("off")).otherwise(0)).alias("longest"),
        )
    )
    rows = []
    for r in sorted(per_stretch.collect(), key=lambda r: r["node"]):
        on, off = int(r["online_ms"]), int(r["offline_ms"])
        rows.append(
            {
                "node": r["node"],
                "online_ms": on,
                "offline_ms": off,
                "unknown_ms": (until - since) - on - off,
                "availability_pct": 100.0 * on / (on + off) if on + off else None,
                "flaps": int(r["flaps"]),
                "longest_outage_ms": int(r["longest"]),
            }
        )
    return rows, _by_day(F, spans.where(offline & (F.col("known") > 0)), since, until, gaps)


def _by_day(
    F: Any, offline: Any, since: int, until: int, gaps: list[tuple[int, int]]
) -> list[dict[str, Any]]:
    lo = F.greatest(F.col("ts"), F.lit(since))
    hi = F.least(F.col("end"), F.lit(until))
    days = offline.select(
        "node",
        lo.alias("lo"),
        hi.alias("hi"),
        F.explode(F.sequence(lo - lo % DAY_MS, hi - 1, F.lit(DAY_MS))).alias("day"),
    )
    piece_lo = F.greatest(F.col("lo"), F.col("day"))
    piece_hi = F.least(F.col("hi"), F.col("day") + DAY_MS)
    rows = (
        days.groupBy("node", "day")
        .agg(F.sum(_known(F, piece_lo, piece_hi, gaps)).alias("ms"))
        .where(F.col("ms") > 0)
        .collect()
    )
    return [
        {"node": r["node"], "day": uptime.day_name(r["day"]), "offline_ms": int(r["ms"])}
        for r in sorted(rows, key=lambda r: (r["node"], r["day"]))
    ]
