"""The fleet report on Spark: the figures of ``metrics.py``, computed where the data is.

Every definition is the one ``metrics.py`` (and ``uptime.py``) documents; tests hold
both to the same hand-computed answers. Only small results (one row per node, per
command, per node and metric) come back to the driver.

The plan, one pass per table family (measured on 10M events, 2 cores, with the event
log's SQL metrics: see bench/pipeline.py --event-log): one aggregate over the input for
the counts and the default window; the liveness events (few) cached for availability;
the ``node_state`` events of the window joined with their job's marks (a broadcast: one
small row per job) and their late nodes' own (another: one row per node asked late), then

- one aggregation with grouping sets for every outcome table (per command and node, per
  command, per day and command), and one small one over job events for halted jobs;
- the latency samples as a sorted list per (metric, command, node), cached, from which
  the per-node percentiles and the stragglers are taken, and counted per (metric,
  command, value), cached, for the fleet's and each command's (``spark_latency.py``).

With rollups (``spark_rollups.py``) the whole days of the window come from them: their
kept rows join the raw events above, and their counts, lists and counted samples are added to
what the raw events give, table by table (``_outcomes``, the latency lists and counts).

Where the time goes at 10M events: the outcomes' aggregation (28M expanded rows into
3.5M groups) is most of it, then the latency lists (6.2M samples into 80k sorted lists)
and Spark's fixed cost. Caching the joined events themselves cost more than reading the
Parquet again. Measured on 10M events and not taken: aggregating
the outcomes first to (command, node, job, day) and rolling the tables up from that took
14-42 % more CPU than the grouping sets (the distinct jobs need the job in the key either
way, so the first step shrinks the rows only threefold); command and node as small
integers (a broadcast join of their distinct names) left the value counts' CPU as it was
(10.6 s against 10.2 s, warm) and the outcomes' higher, before the 4 CPU s of the pass
that finds the names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from pushjobs.pipeline import events, rollup, spark_latency, spark_liveness, spark_rollups
from pushjobs.pipeline.metrics import (
    ANSWERED,
    COUNTED,
    DAY_MS,
    DEFAULT_GAP_MS,
    DEFAULT_MIN_SAMPLES,
    FAILURES,
    HALTED,
    LATE,
    OUTCOMES,
    RUN_ENDS,
    UNKNOWN_COMMAND,
    VOTED,
    Report,
    marks_from,
)
from pushjobs.pipeline.spark_latency import RUN, VOTE
from pushjobs.pipeline.spark_rollups import Rolled

APPROX_BOUND = "0.5 %"
"""With ``approx``: every percentile within 0.5 % of the exact one (values rounded to
three significant digits before the percentiles are taken)."""


def schema() -> Any:
    from pyspark.sql import types as T

    kinds = {"int64": T.LongType(), "string": T.StringType()}
    return T.StructType(
        [T.StructField(name, kinds[kind], nullable=True) for name, kind in events.COLUMNS]
    )


def load(
    spark: Any,
    location: str,
    since: int | None = None,
    until: int | None = None,
    skip: Collection[str] = (),
) -> Any:
    """The archived events under ``location`` that a window ``[since, until)`` needs.

    Only complete files of the date partitions are read (``date=*/*.parquet``: not the
    rejected records, not a running archiver's ``*.tmp``), and no day after the window.
    With ``since``, the window's days are read whole; the day before only for its marks:
    its ``job_state`` events (of jobs that started then) and its late nodes' ``offline``
    -> ``new`` (``late_marks``: when such a node's commit went); and the days before the
    window only for their liveness columns, since a node's state may have been set long
    ago. The archive keeps each family in row groups of its own, so the reader skips the
    rest of those days by the ``kind`` statistics of their row groups. The late marks are
    among the node events, so of the day before the columns a mark needs of those are
    read too (a one-day window of bench/pipeline.py's 1M events: 14 % of the bytes, 8.4 %
    before). Days in ``skip`` (``YYYY-MM-DD``) are not read: a report takes them from
    their rollups.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    base = location.rstrip("/")
    reader = spark.read.schema(schema()).option("basePath", base)
    try:
        df = reader.option("pathGlobFilter", "*.parquet").parquet(f"{base}/date=*")
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc) and "does not exist" not in str(exc):
            raise
        return spark.createDataFrame([], schema())
    names = [name for name, _ in events.COLUMNS]
    day = F.col("date").cast("string")
    if until is not None:
        df = df.where(day <= events.day(max(0, until - 1)))
    if skip:
        df = df.where(~day.isin(*sorted(skip)))
    if since is None:
        return df.select(*names)
    first = events.day(since)
    kind = F.col("kind")
    types = {"int64": "bigint", "string": "string"}

    def only(kept: tuple[str, ...]) -> list[Any]:
        return [
            F.col(name) if name in kept else F.lit(None).cast(types[t]).alias(name)
            for name, t in events.COLUMNS
        ]

    recent = df.where(day >= first).select(*names)
    marks = df.where(
        (day >= events.day(max(0, marks_from(since))))
        & (day < first)
        & ((kind == "job_state") | late_marks(F))
    ).select(*only(("offset", "ts", "kind", "job_id", "node", "state", "prev_state")))
    older = df.where((day < first) & kind.isin("node_online", "node_offline")).select(
        *only(("offset", "ts", "kind", "node"))
    )
    return recent.unionByName(marks).unionByName(older)


def late_marks(F: Any) -> Any:
    """Usable ``node_state`` rows of a node asked after waiting offline (``offline`` ->
    ``new``, ``metrics.is_late``): when its commit went. Usable ones only: a day before
    the window is read for these, and its unusable rows are not counted there."""
    node, job = F.col("node"), F.col("job_id")
    return (
        (F.col("kind") == "node_state")
        & (F.col("prev_state") == "offline")
        & (F.col("state") == "new")
        & node.isNotNull()
        & (node != "")
        & job.isNotNull()
        & (job != "")
    )


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
    min_samples: int = DEFAULT_MIN_SAMPLES,
    server_gap_ms: int = DEFAULT_GAP_MS,
    approx: bool = False,
    progress: Callable[[str], None] = lambda stage: None,
    rolled: Rolled | None = None,
) -> Report:
    """The report of ``df``'s events in the window; ``progress`` hears each stage as it
    starts (a first report takes tens of seconds, most of it Spark's own warm-up).

    With ``rolled`` (``spark_rollups.py``: the window's whole days from their rollups,
    ``df`` the raw events of the rest) the same report; the window must be given."""
    from pyspark.sql import functions as F

    ok = usable(F)
    ts = F.col("ts")
    inside = ok  # the bounds given; a default bound holds for every usable event
    if since is not None:
        inside = inside & (ts >= since)
    if until is not None:
        inside = inside & (ts < until)
    first = df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(ok, 1)).alias("good"),
        F.count(F.when(inside, 1)).alias("inside"),
        F.min(F.when(ok, ts)).alias("lo"),
        F.max(F.when(ok, ts)).alias("hi"),
    ).first()
    report = Report(since, until, skipped=first["rows"] - first["good"])
    if rolled is not None:
        assert since is not None and until is not None, "a report from rollups has a window"
        report.skipped += rolled.skipped()
    if first["good"] == 0 and (rolled is None or not rolled.events()):
        return report
    since = first["lo"] if since is None else since
    until = first["hi"] + 1 if until is None else until
    report.since, report.until = since, until
    if until <= since:
        return report
    report.events = first["inside"] + (rolled.events() if rolled is not None else 0)
    read = f"{first['rows']:,} events read"
    if rolled is not None:
        read += f" and {len(rolled.inside)} days' rollups"
    progress(f"{read}, {report.events:,} in the window; availability")
    command = F.col("command")
    raw_good = df.where(ok)
    merged = raw_good if rolled is None else raw_good.unionByName(rolled.kept.where(ok))
    good = merged.withColumn(
        "command",
        F.when(command.isNull() | (command == ""), F.lit(UNKNOWN_COMMAND)).otherwise(command),
    )
    live = spark_liveness.marked(F, good, until).cache()
    try:
        if rolled is None:
            gaps = spark_liveness.server_gaps(
                F, _gap_events(F, good, since), live, until, server_gap_ms
            )
        else:
            gaps = _rolled_gaps(
                F, raw_good, rolled, live, since=since, until=until, gap_ms=server_gap_ms
            )
        report.server_gaps = [(max(a, since), min(b, until)) for a, b in gaps if b > since]
        report.availability, report.downtime_by_day = spark_liveness.availability(
            F, live, since, until, gaps
        )
    finally:
        live.unpersist()
    progress("outcomes by command, node and day")
    states = _node_states(F, good, since, until)
    report.outcomes, report.by_command, report.outcomes_by_day = _outcomes(F, states, rolled)
    halted = _halted(F, good, since, until)
    for row in report.by_command:
        row[HALTED] = halted.get(row["command"], 0)
    progress("latency percentiles and stragglers")
    rows = spark_latency.samples(F, states)
    lists = spark_latency.lists(F, rows, approx)
    if rolled is None:
        lists = spark_latency.merged_lists(F, lists, "metric", "command", "node").cache()
        # From the cached lists: reading the samples again cost four times as much.
        commands = spark_latency.per_command(F, spark_latency.counted_lists(F, lists)).cache()
    else:
        # The raw events of the partial days are few: read twice. The whole days' counted
        # samples are a tenth of their lists' values.
        lists = lists.unionByName(spark_latency.rolled_lists(F, rolled.samples, approx))
        lists = spark_latency.merged_lists(F, lists, "metric", "command", "node").cache()
        commands = spark_latency.counted(F, rows, approx).unionByName(
            spark_latency.rounded_counts(F, rolled.command_samples, approx)
        )
        commands = spark_latency.per_command(F, commands).cache()
    try:
        report.latency = spark_latency.latency(F, lists, commands)
        report.latency_by_command = spark_latency.latency_by_command(F, commands)
        report.stragglers = spark_latency.stragglers(
            F,
            lists,
            report.latency_by_command,
            factor=straggler_factor,
            min_samples=min_samples,
        )
    finally:
        lists.unpersist()
        commands.unpersist()
    return report


def _node_states(F: Any, good: Any, since: int, until: int) -> Any:
    """``node_state`` events in the window, each saying whether it is a node asked late
    (``late``), with their latency sample (metric, ms) if any."""
    ts = F.col("ts")
    marked = (ts >= marks_from(since)) & (ts < until)
    marks = (
        good.where((F.col("kind") == "job_state") & marked)
        .groupBy("job_id")
        .agg(
            F.min(F.when(F.col("state") == "voting", ts)).alias("voting_ts"),
            F.min(F.when(F.col("state") == "running", ts)).alias("running_ts"),
        )
    )
    # A late node's commit went when it was asked: one row per late node, a broadcast too.
    asked = (
        good.where(late_marks(F) & marked)
        .groupBy("job_id", "node")
        .agg(F.min(ts).alias("asked_ts"))
    )
    states = good.where((F.col("kind") == "node_state") & (ts >= since) & (ts < until)).select(
        "job_id", "node", "command", "state", "prev_state", "ts", "duration_ms"
    )
    joined = states.join(F.broadcast(marks), "job_id", "left").join(
        F.broadcast(asked), ["job_id", "node"], "left"
    )
    prev, state = F.col("prev_state"), F.col("state")
    sent = F.coalesce(F.col("asked_ts"), F.col("voting_ts"))
    vote = (prev == "new") & state.isin(*VOTED) & sent.isNotNull()
    took = F.coalesce(F.col("duration_ms"), ts - F.col("running_ts"))
    end = prev.isin("ready", "running") & state.isin(*RUN_ENDS) & took.isNotNull()
    return joined.select(
        "job_id",
        "node",
        "command",
        "state",
        ((prev == "offline") & (state == "new")).alias(LATE),
        (ts - ts % DAY_MS).alias("day"),
        F.when(vote, F.lit(VOTE).cast("byte")).when(end, F.lit(RUN).cast("byte")).alias("metric"),
        F.greatest(F.lit(0), F.when(vote, ts - sent).otherwise(took)).alias("ms"),
    )


def _halted(F: Any, good: Any, since: int, until: int) -> dict[str, int]:
    """Per command, its jobs that ended ``halted`` in the window (job events only: few)."""
    ts = F.col("ts")
    rows = (
        good.where(
            (F.col("kind") == "job_state")
            & (F.col("state") == HALTED)
            & (ts >= since)
            & (ts < until)
        )
        .groupBy("command")
        .agg(F.countDistinct("job_id").alias("jobs"))
        .collect()
    )
    return {r["command"]: int(r["jobs"]) for r in rows}


def _outcomes(
    F: Any, states: Any, rolled: Rolled | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Outcomes per (command, node), per command and per (day, command): one aggregation
    (and, with ``rolled``, the whole days' counts added)."""
    from pushjobs.pipeline.uptime import day_name

    state = F.col("state")
    rows = (
        states.groupingSets(
            [["command", "node"], ["command"], ["day", "command"]], "command", "node", "day"
        )
        .agg(
            F.grouping_id().alias("set"),
            F.countDistinct("job_id").alias("jobs"),
            *[F.count(F.when(state == s, 1)).alias(s) for s in OUTCOMES],
            F.count(F.when(F.col(LATE), 1)).alias(LATE),
        )
        .collect()
    )
    # grouping_id bits, in the order command, node, day: 1 where a column is not grouped
    per_node = [r.asDict() for r in rows if r["set"] == 0b001]
    jobs = {r["command"]: int(r["jobs"]) for r in rows if r["set"] == 0b011}
    daily: dict[tuple[int, str], dict[str, int]] = {}
    for r in rows:
        if r["set"] == 0b010:
            daily[(r["day"], r["command"])] = {s: int(r[s]) for s in COUNTED}
    if rolled is not None:
        # The whole days' counts, per (command, node) and per (day, command), in one pass.
        summed = (
            rolled.outcomes.groupingSets(
                [["command", "node"], ["day", "command"]], "command", "node", "day"
            )
            .agg(
                F.grouping_id().alias("set"),
                F.sum("jobs").alias("jobs"),
                *[F.sum(s).alias(s) for s in COUNTED],
            )
            .collect()
        )
        rolled_jobs = {
            r["command"]: int(r["jobs"])
            for r in rolled.commands.groupBy("command").agg(F.sum("jobs").alias("jobs")).collect()
        }
        rolled_rows = [r.asDict() for r in summed if r["set"] == 0b001]
        per_node, jobs = spark_rollups.merge_outcomes(per_node, jobs, rolled_rows, rolled_jobs)
        for r in summed:
            if r["set"] == 0b010:
                into = daily.setdefault((r["day"], r["command"]), dict.fromkeys(COUNTED, 0))
                for s in COUNTED:
                    into[s] += int(r[s])
    table = [
        {"command": r["command"], "node": r["node"], "jobs": int(r["jobs"])}
        | {s: int(r[s]) for s in COUNTED}
        for r in sorted(per_node, key=lambda r: (r["command"], r["node"]))
    ]
    by_command: dict[str, dict[str, Any]] = {}
    for row in table:  # sums per command, from the per-node rows
        c = row["command"]
        agg = by_command.setdefault(
            c, {"command": c, "jobs": jobs[c], "nodes": 0, **dict.fromkeys(COUNTED, 0)}
        )
        agg["nodes"] += 1
        for s in COUNTED:
            agg[s] += row[s]
    by_day = [
        {
            "day": day_name(day),
            "command": command,
            "outcomes": sum(c[s] for s in ANSWERED),
            "failures": sum(c[s] for s in FAILURES),
        }
        for (day, command), c in sorted(daily.items())
        if sum(c[s] for s in ANSWERED)
    ]
    return table, [by_command[c] for c in sorted(by_command)], by_day


def _gap_events(F: Any, rows: Any, since: int) -> Any:
    """``rows`` less the late marks read from the days before the window (``load``):
    server gaps are found from the same events whether those days come raw or rolled up
    (where only the late marks of jobs that are not regular are kept)."""
    return rows.where((F.col("kind") != "node_state") | (F.col("ts") >= since - since % DAY_MS))


def _rolled_gaps(
    F: Any, raw_good: Any, rolled: Rolled, live: Any, *, since: int, until: int, gap_ms: int
) -> list[tuple[int, int]]:
    """The server gaps before ``until`` from the whole days' silences and the rest's events
    (``spark_rollups.gap_candidates``): the same as from the raw events."""
    width = rollup.SILENCE_MS
    ts = F.col("ts")
    # The kept rows of the days before the window (those of whole days are in their
    # silences already).
    rest = _gap_events(F, raw_good, since).select("ts")
    rest = rest.unionByName(_gap_events(F, rolled.kept.where(ts < since), since).select("ts"))
    slices = rest.where(ts < until).groupBy(F.floor(ts / width))
    buckets = [
        (int(r["lo"]), int(r["hi"]))
        for r in slices.agg(F.min(ts).alias("lo"), F.max(ts).alias("hi")).collect()
    ]
    again = sorted(r["ts"] for r in live.where(F.col("again")).select("ts").collect())
    candidates = spark_rollups.gap_candidates(rolled, buckets, width)
    return spark_rollups.server_gaps(candidates, again, gap_ms)
