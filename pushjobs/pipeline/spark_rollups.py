"""A report from rollups: which days it reads rolled up, and those days' tables on Spark.

``rollup.py`` says what a day's rollup holds. A report over ``[since, until)`` reads the
rollup of every *whole* day of its window that has a valid one, and the raw events of the
rest, exactly as ``spark_job.load`` would (the partial days at the window's ends, days
not rolled up yet). The days before the window are read from their rollups too where
they have one: their liveness events (and the day before the window's marks: its
``job_state`` events, and its late nodes' ``offline`` -> ``new``, which only a job
that is not regular can need, and whose node events a rollup keeps raw) are in the
rollup's ``kept`` rows.

``spark_job.compute`` then takes the raw events and the rollups (``Rolled``) together:

- every figure computed from liveness and job events (availability, flaps, outages,
  the jobs' marks, halted jobs) from the raw events and ``kept`` rows, as before;
- outcomes: the raw and kept ``node_state`` events counted as before, plus each whole
  day's counts of its regular jobs (a regular job lies in one day, so its distinct count
  adds up: ``merge_outcomes``);
- latencies: the raw and kept events' samples, plus the whole days' lists of samples
  (per metric, command and node) and counted samples (per metric and command);
- server gaps: consecutive events more than ``server_gap_ms`` apart, from the whole days'
  silences and the raw events' (``gap_candidates``): the same pairs as from raw events.

A rollup can be used only where the report's driver can list the archive (a directory,
or ``file:`` URL); on any other location every day is read raw.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pushjobs.pipeline import events, rollup, uptime
from pushjobs.pipeline.jobspans import DAY_MS
from pushjobs.pipeline.metrics import COUNTED, marks_from
from pushjobs.pipeline.rollup import Manifest


@dataclass(slots=True)
class Rolled:
    """The rolled-up days a report reads, by their part in it, and their tables."""

    inside: dict[str, Manifest]  # whole days of the window
    before: dict[str, Manifest] = field(default_factory=dict)  # the day before: + marks
    older: dict[str, Manifest] = field(default_factory=dict)  # earlier: liveness only
    outside: dict[str, Manifest] = field(default_factory=dict)  # no window yet: rows only
    kept: Any = None  # raw-schema rows of inside, before and older days, as load() keeps
    outcomes: Any = None  # per (command, node) of each inside day (``day`` added)
    commands: Any = None
    samples: Any = None
    command_samples: Any = None

    @property
    def days(self) -> list[str]:
        return sorted({*self.inside, *self.before, *self.older, *self.outside})

    def skipped(self) -> int:
        """Unusable rows the raw reading of these days would have counted."""
        return (
            sum(m.rows - m.good for m in (*self.inside.values(), *self.outside.values()))
            + sum(m.bad_job_state + m.bad_liveness for m in self.before.values())
            + sum(m.bad_liveness for m in self.older.values())
        )

    def events(self) -> int:
        """Usable events of the inside days: all of them are in the window."""
        return sum(m.good for m in self.inside.values())


def local_dir(location: str) -> Path | None:
    """The archive as a local directory, or None where the driver cannot list it."""
    if location.startswith("file://"):
        location = location.removeprefix("file://")
    elif "://" in location:
        return None
    path = Path(location)
    return path if path.is_dir() else None


def window_bounds(
    valid: dict[str, Manifest], raw: tuple[int | None, int | None]
) -> tuple[int, int] | None:
    """The default window ``[first usable event, last + 1)`` from the rolled days' first
    and last events and the raw days' (``raw``); None when there is no usable event."""
    los = [m.lo for m in valid.values() if m.lo is not None]
    his = [m.hi for m in valid.values() if m.hi is not None]
    los += [raw[0]] if raw[0] is not None else []
    his += [raw[1]] if raw[1] is not None else []
    if not los or not his:
        return None
    return min(los), max(his) + 1


def prepare(
    spark: Any, location: str, since: int | None, until: int | None, gap_ms: int
) -> tuple[Any, Rolled | None, int | None, int | None, str]:
    """What a report reads: the raw events (a DataFrame), the rollups (None: raw events
    only), the window (resolved when rollups are read) and a line saying which and why."""
    from pyspark.sql import functions as F

    from pushjobs.pipeline import spark_job

    def raw_only(why: str) -> tuple[Any, None, int | None, int | None, str]:
        return spark_job.load(spark, location, since, until), None, since, until, why

    path = local_dir(location)
    if path is None:
        return raw_only("raw events only: rollups are read from a local directory")
    valid = rollup.valid(path)
    if not valid:
        return raw_only("raw events only: no day rolled up yet (pushjobs archive rolls them up)")
    if gap_ms < rollup.SILENCE_MS:
        return raw_only(
            f"raw events only: server_gap_s under {rollup.SILENCE_MS // 1000} s needs them"
        )
    whole = since is None
    window = (since, until)
    if since is None or until is None:
        rest = spark_job.load(spark, location, None, until, skip=valid)
        ok, ts = spark_job.usable(F), F.col("ts")
        bounds = rest.agg(F.min(F.when(ok, ts)).alias("lo"), F.max(F.when(ok, ts)).alias("hi"))
        row = bounds.first()
        found = window_bounds(valid, (row["lo"], row["hi"]))
        if found is None:
            return raw_only("raw events only: no usable event")
        window = (found[0] if since is None else since, found[1] if until is None else until)
    lo, hi = window
    assert lo is not None and hi is not None
    rolled = choose(valid, lo, hi, whole=whole)
    if rolled is None:
        return raw_only("raw events only: no whole day of the window is rolled up")
    load(spark, path, rolled)
    raw = spark_job.load(spark, location, None if whole else lo, hi, skip=rolled.days)
    said = f"{len(rolled.inside)} whole days from their rollups, the rest from raw events"
    return raw, rolled, lo, hi, said


def choose(valid: dict[str, Manifest], since: int, until: int, *, whole: bool) -> Rolled | None:
    """Which valid rollups the window ``[since, until)`` reads, and as what; None if no
    whole day of the window has one (the report reads raw events only)."""
    first = since - since % DAY_MS
    inside = {
        d: m for d, m in valid.items() if since <= m.midnight and m.midnight + DAY_MS <= until
    }
    if not inside:
        return None
    rolled = Rolled(inside)
    last_day = events.day(max(0, until - 1))
    for day, m in valid.items():
        if day in inside or day > last_day:
            continue
        if whole:
            # No window was given: every day is read whole. One with no usable event lies
            # before the window (only its rows count); any other is a partial day: raw.
            if m.good == 0:
                rolled.outside[day] = m
        elif m.midnight >= first:
            continue  # a partial day of the window: raw
        elif m.midnight >= marks_from(since):
            rolled.before[day] = m
        else:
            rolled.older[day] = m
    return rolled


def load(spark: Any, location: Path, rolled: Rolled) -> None:
    """Read the chosen days' tables (lazily) into ``rolled``."""
    from pyspark.sql import functions as F

    from pushjobs.pipeline.spark_job import late_marks, schema

    def files(days: Any, table: str) -> list[str]:
        return [str(rollup.folder(location, d) / f"{table}.parquet") for d in sorted(days)]

    kind = F.col("kind")
    names = [name for name, _ in events.COLUMNS]
    reader = spark.read.schema(schema())
    kept = reader.parquet(*files(rolled.inside, "kept")).select(*names)
    if rolled.before:
        # The day before the window: its marks, and (as every day before it) its liveness.
        kept = kept.unionByName(
            reader.parquet(*files(rolled.before, "kept"))
            .where(kind.isin("job_state", "node_online", "node_offline") | late_marks(F))
            .select(*names)
        )
    if rolled.older:
        kept = kept.unionByName(
            reader.parquet(*files(rolled.older, "kept"))
            .where(kind.isin("node_online", "node_offline"))
            .select(*names)
        )
    rolled.kept = kept
    # Schemas given: Spark would otherwise read footers in a job of its own per table.
    for table, ddl in SCHEMAS.items():
        setattr(rolled, table, spark.read.schema(ddl).parquet(*files(rolled.inside, table)))


SCHEMAS = {
    "outcomes": "command string, node string, jobs bigint, "
    + ", ".join(f"{s} bigint" for s in COUNTED)
    + ", day bigint",
    "commands": "command string, jobs bigint",
    "samples": "metric tinyint, command string, node string, ms array<bigint>",
    "command_samples": "metric tinyint, command string, ms bigint, cnt bigint",
}
"""The rollup tables as ``rollup.py`` writes them."""


# --- merging ---------------------------------------------------------------------------------


def gap_candidates(
    rolled: Rolled, buckets: list[tuple[int, int]], width_ms: int
) -> list[tuple[int, int]]:
    """Every pair of consecutive events more than ``width_ms`` apart: within the inside
    days (their silences), and between the pieces of the rest (``buckets``: the first
    and last event of each non-empty ``width_ms`` slice of the other events read)."""
    pieces: list[tuple[int, int, tuple[tuple[int, int], ...]]] = [
        (m.lo, m.hi, m.silences)
        for m in rolled.inside.values()
        if m.lo is not None and m.hi is not None
    ]
    pieces += [(lo, hi, ()) for lo, hi in buckets]
    pieces.sort()
    pairs = [pair for _, _, silences in pieces for pair in silences]
    for (_, end, _), (start, _, _) in itertools.pairwise(pieces):
        if start - end > width_ms:
            pairs.append((end, start))
    return sorted(pairs)


def server_gaps(
    candidates: list[tuple[int, int]], reannounced: list[int], gap_ms: int
) -> list[tuple[int, int]]:
    """``uptime.server_gaps`` over the candidate pairs: those more than ``gap_ms`` apart
    that a re-announcement follows within ``gap_ms``."""
    found = []
    for a, b in candidates:
        if b - a > gap_ms and uptime.server_gaps([a, b], reannounced, gap_ms):
            found.append((a, b))
    return found


def merge_outcomes(
    raw_rows: list[dict[str, Any]],
    raw_jobs: dict[str, int],
    rolled_rows: list[dict[str, Any]],
    rolled_jobs: dict[str, int],
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per (command, node) rows and per command distinct jobs: the raw events' plus the
    regular jobs' (disjoint: a regular job's node events are all in one rolled day)."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for row in (*raw_rows, *rolled_rows):
        key = (row["command"], row["node"])
        into = table.setdefault(
            key, {"command": key[0], "node": key[1], "jobs": 0, **dict.fromkeys(COUNTED, 0)}
        )
        into["jobs"] += int(row["jobs"])
        for s in COUNTED:
            into[s] += int(row[s])
    jobs = dict(raw_jobs)
    for command, n in rolled_jobs.items():
        jobs[command] = jobs.get(command, 0) + n
    return [table[k] for k in sorted(table)], jobs
