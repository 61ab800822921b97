"""Rollups: a closed day of the archive, aggregated once, so that a report over a month reads
thirty small sets of tables and raw events only for the partial days at its ends.

The raw events stay the source of truth; a rollup is derived from one day's raw files,
names them (``sources``), and is used only while they are still exactly the day's files.
Every table of the report can be computed from it, with the same answers as from the raw
events (``spark_job.compute`` with ``rolled``; the tests hold the two to each other):

    OUT/_rollups/date=YYYY-MM-DD/
        kept.parquet       raw rows, the archive's own columns: every liveness and
                           ``job_state`` event of the day (few: availability, server
                           downtime and the jobs' marks are computed from them as from the
                           raw events), and the ``node_state`` events of the day's jobs
                           that are not regular (below)
        outcomes.parquet   per (command, node): distinct regular jobs, how many of
                           their node events ended in each outcome, and how many were
                           ``late`` (``offline`` -> ``new``); the day (midnight)
        commands.parquet   per command: distinct regular jobs
        samples.parquet    latency samples of regular jobs, one row per (metric, command,
                           node) with its values as a sorted list ``ms``; exact (no
                           rounding: ``--approx`` rounds at report time)
        command_samples.parquet  the same merged over nodes and counted: (metric,
                           command, ms, cnt), for the fleet's and each command's
                           percentiles
        manifest.json      written last: the raw files it was built from, the day's row
                           counts (all, usable, unusable ``job_state`` and liveness rows:
                           what ``skipped`` counts depends on the window), the first and
                           last usable event, and the *silences*: each pair of
                           consecutive usable events more than ``SILENCE_MS`` apart (a
                           server gap is such a pair: ``uptime.py``)

A job is *regular* for a day when every one of its ``node_state`` and ``job_state``
events, in the whole archive, lies in that day (``jobspans.py``): then its node counts,
its distinct count and its latencies (marks included: the job's, and a late node's own
``offline`` -> ``new``) are the same in every window that holds the whole day, and add up
across days. Every other job's node events are kept raw (a job that waited for an offline
node past midnight among them).

Which days: a day is *closed* once the archive holds a later day; each closed day with no
valid rollup gets one when the archiver runs (``update``). An event archived late into a
closed day changes its files, so its rollup stops being used and is built again. A day
whose files hold events of another day (not written by the archiver) is not rolled up.

Written under a temporary directory, each file fsynced, then renamed into place: killed
at any point, a day has its old rollup, its new one, or none (then it is built again);
leftover temporary directories are removed at the next run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from pushjobs.errors import MissingExtra
from pushjobs.paths import fsync_dir
from pushjobs.pipeline import events, jobspans
from pushjobs.pipeline.jobspans import DAY_MS, JobSpans
from pushjobs.pipeline.metrics import COUNTED, LATE, OUTCOMES, RUN_ENDS, UNKNOWN_COMMAND, VOTED

# /1 had no command_samples, /2 counted samples, /3 timed a late node's vote from the job's
# voting and had no unavailable and late counts: rebuilt
FORMAT = "pushjobs-rollup/4"
ROLLUPS = "_rollups"
SILENCE_MS = 5000
"""Consecutive events further apart than this are written down: a report can find every
server gap of ``server_gap_s`` >= 5 s from the rollups (a shorter one reads raw events)."""
TABLES = ("kept", "outcomes", "commands", "samples", "command_samples")
DATE_RE = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
RAW_RE = re.compile(r"^events-\d{20}-\d{20}\.parquet$")
LIVENESS = ("node_online", "node_offline")  # as archive.LIVENESS, in a stable order
VOTE, RUN = 0, 1  # metrics.METRICS.index: commit_to_ack, run_to_finish


def _arrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra("pyarrow", "spark") from None
    return pa, pc, pq


@dataclass(frozen=True, slots=True)
class Manifest:
    day: str
    sources: tuple[str, ...]
    rows: int = 0  # every row of the day's files
    good: int = 0  # the usable ones
    bad_job_state: int = 0  # unusable rows of kind job_state
    bad_liveness: int = 0  # unusable rows of kind node_online / node_offline
    lo: int | None = None  # the first and last usable event
    hi: int | None = None
    silences: tuple[tuple[int, int], ...] = ()
    regular_jobs: int = 0
    kept_rows: int = 0
    format: str = FORMAT

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_INDENT_2)

    @property
    def midnight(self) -> int:
        return day_ms(self.day)


def day_ms(day: str) -> int:
    """``2026-11-23`` -> its UTC midnight, ms."""
    from datetime import UTC, datetime

    return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp() * 1000)


def decode(raw: bytes) -> Manifest | None:
    """A manifest as written by this version; None for anything else (rebuilt)."""
    try:
        doc = orjson.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return None
        doc["sources"] = tuple(doc["sources"])
        doc["silences"] = tuple((int(a), int(b)) for a, b in doc["silences"])
        return Manifest(**doc)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


# --- the archive's days ---------------------------------------------------------------------


def raw_days(out: Path) -> list[str]:
    """The date partitions of the archive, oldest first."""
    if not out.is_dir():
        return []
    found = (DATE_RE.match(p.name) for p in out.iterdir() if p.is_dir())
    return sorted(m.group(1) for m in found if m)


def raw_files(out: Path, day: str) -> tuple[str, ...]:
    """The day's complete event files, by name (a running archiver's ``.tmp`` aside)."""
    folder = out / f"date={day}"
    if not folder.is_dir():
        return ()
    return tuple(sorted(p.name for p in folder.iterdir() if RAW_RE.match(p.name)))


def folder(out: Path, day: str) -> Path:
    return out / ROLLUPS / f"date={day}"


def read_manifest(out: Path, day: str) -> Manifest | None:
    try:
        raw = (folder(out, day) / "manifest.json").read_bytes()
    except OSError:
        return None
    found = decode(raw)
    return found if found is not None and found.day == day else None


def valid(out: Path) -> dict[str, Manifest]:
    """Every day whose rollup can be used now: its raw files are the ones it was built from."""
    out_days = {}
    for day in raw_days(out):
        m = read_manifest(out, day)
        if m is not None and m.sources == raw_files(out, day):
            out_days[day] = m
    return out_days


def remove_day(out: Path, day: str) -> None:
    """Remove a day's rollup (it is built again when the archiver next runs)."""
    path = folder(out, day)
    if path.exists():
        trash = path.with_name(f".old-{path.name}-{os.getpid()}")
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)


# --- building one day ----------------------------------------------------------------------


def _usable(pc: Any, t: Any) -> Any:
    """The rows a report can use (``spark_job.usable``, ``metrics.usable``)."""
    kind = t["kind"]

    def present(name: str) -> Any:
        col = t[name]
        return pc.and_(pc.is_valid(col), pc.not_equal(pc.fill_null(col, ""), ""))

    need = pc.if_else(
        pc.is_in(kind, value_set=_strings(LIVENESS)),
        present("node"),
        pc.if_else(
            pc.equal(kind, "node_state"),
            pc.and_(pc.and_(present("node"), present("job_id")), present("state")),
            pc.if_else(
                pc.equal(kind, "job_state"), pc.and_(present("job_id"), present("state")), True
            ),
        ),
    )
    ok = pc.and_(pc.is_valid(t["ts"]), pc.is_in(kind, value_set=_strings(sorted(events.KINDS))))
    return pc.fill_null(pc.and_(ok, need), False)


def _strings(values: Iterable[str]) -> Any:
    pa, _, _ = _arrow()
    return pa.array(list(values), pa.string())


def _silences(pc: Any, ts: Any) -> tuple[tuple[int, int], ...]:
    """Consecutive times (sorted) more than SILENCE_MS apart."""
    if len(ts) < 2:
        return ()
    ordered = pc.array_sort_indices(ts)
    values = pc.take(ts, ordered)
    gaps = pc.pairwise_diff(values)
    at = pc.indices_nonzero(pc.fill_null(pc.greater(gaps, SILENCE_MS), False))
    # gaps[i] = values[i] - values[i - 1]: take just those ends, not the day's every time
    ends = pc.take(values, at).to_pylist()
    starts = pc.take(values, pc.subtract(at, 1)).to_pylist()
    return tuple(zip(starts, ends, strict=True))


def build_day(out: Path, day: str, regular: set[str]) -> Manifest | None:
    """Write ``day``'s rollup from its raw files; None (nothing written) when its files
    hold events of another day."""
    pa, pc, pq = _arrow()
    from pushjobs.pipeline.archive import arrow_schema, write_table

    sources = raw_files(out, day)
    schema = arrow_schema()
    tables = [pq.read_table(out / f"date={day}" / name, schema=schema) for name in sources]
    t = pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()
    start = day_ms(day)
    ts = t["ts"]
    if len(t) and (
        (pc.min(ts).as_py() or start) < start or (pc.max(ts).as_py() or start) >= start + DAY_MS
    ):
        return None
    usable = _usable(pc, t)
    kind = t["kind"]
    good = t.filter(usable)
    good_ts = good["ts"]
    unusable = pc.invert(usable)

    def count(mask: Any) -> int:
        return int(pc.sum(pc.cast(pc.fill_null(mask, False), pa.int64())).as_py() or 0)

    is_regular = pc.is_in(good["job_id"], value_set=pa.array(sorted(regular), pa.string()))
    g_kind = good["kind"]
    node_state = pc.equal(g_kind, "node_state")
    keep = pc.or_(
        pc.is_in(g_kind, value_set=_strings((*LIVENESS, "job_state"))),
        pc.and_(node_state, pc.invert(pc.fill_null(is_regular, False))),
    )
    kept = good.filter(pc.fill_null(keep, False))
    states = good.filter(pc.fill_null(pc.and_(node_state, is_regular), False))
    marks = good.filter(pc.fill_null(pc.and_(pc.equal(g_kind, "job_state"), is_regular), False))
    manifest = Manifest(
        day=day,
        sources=sources,
        rows=len(t),
        good=len(good),
        bad_job_state=count(pc.and_(unusable, pc.equal(kind, "job_state"))),
        bad_liveness=count(pc.and_(unusable, pc.is_in(kind, value_set=_strings(LIVENESS)))),
        lo=pc.min(good_ts).as_py() if len(good) else None,
        hi=pc.max(good_ts).as_py() if len(good) else None,
        silences=_silences(pc, good_ts.combine_chunks() if len(good) else pa.array([], pa.int64())),
        regular_jobs=len(pc.unique(states["job_id"])) if len(states) else 0,
        kept_rows=len(kept),
    )
    samples = _samples(pa, pc, states, marks)
    # Sorted, then grouped on one thread: each list keeps the order of its rows.
    keys = ["metric", "command", "node"]
    lists = samples.sort_by([(c, "ascending") for c in (*keys, "ms")])
    lists = lists.group_by(keys, use_threads=False).aggregate([("ms", "list")])
    per_command = samples.group_by(["metric", "command", "ms"]).aggregate([("ms", "count")])
    tables_out = {
        "outcomes": _outcomes(pa, pc, states, start),
        "commands": _commands(pa, pc, states),
        "samples": lists.rename_columns({"ms_list": "ms"}).select([*keys, "ms"]),
        "command_samples": per_command.rename_columns({"ms_count": "cnt"})
        .select(["metric", "command", "ms", "cnt"])
        .sort_by([(c, "ascending") for c in ("metric", "command", "ms")]),
    }
    _write(out, day, manifest, lambda tmp: write_table(kept, tmp), tables_out)
    return manifest


def _commanded(pa: Any, pc: Any, states: Any) -> Any:
    """``states`` with an empty or missing command as ``(unknown)``, as reports name it."""
    command = states["command"]
    named = pc.if_else(
        pc.fill_null(pc.not_equal(command, ""), False), command, pa.scalar(UNKNOWN_COMMAND)
    )
    return states.set_column(states.schema.get_field_index("command"), "command", named)


def _outcomes(pa: Any, pc: Any, states: Any, midnight: int) -> Any:
    states = _commanded(pa, pc, states)
    cols = {name: pc.cast(pc.equal(states["state"], name), pa.int64()) for name in OUTCOMES}
    cols[LATE] = pc.cast(pc.fill_null(_late(pc, states), False), pa.int64())
    table = pa.table(
        {"command": states["command"], "node": states["node"], "job_id": states["job_id"], **cols}
    )
    grouped = table.group_by(["command", "node"]).aggregate(
        [("job_id", "count_distinct"), *((name, "sum") for name in COUNTED)]
    )
    renamed = grouped.rename_columns(
        {"job_id_count_distinct": "jobs", **{f"{n}_sum": n for n in COUNTED}}
    )
    out = renamed.select(["command", "node", "jobs", *COUNTED]).sort_by(
        [("command", "ascending"), ("node", "ascending")]
    )
    return out.append_column("day", pa.array([midnight] * len(out), pa.int64()))


def _commands(pa: Any, pc: Any, states: Any) -> Any:
    states = _commanded(pa, pc, states)
    table = pa.table({"command": states["command"], "job_id": states["job_id"]})
    grouped = table.group_by(["command"]).aggregate([("job_id", "count_distinct")])
    return grouped.rename_columns({"job_id_count_distinct": "jobs"}).select(["command", "jobs"])


def _late(pc: Any, states: Any) -> Any:
    """Where a node was asked after waiting offline (``metrics.is_late``)."""
    return pc.and_(pc.equal(states["prev_state"], "offline"), pc.equal(states["state"], "new"))


def _samples(pa: Any, pc: Any, states: Any, marks: Any) -> Any:
    """Latency samples as ``spark_job._node_states`` takes them: (metric, command, node, ms)."""
    states = _commanded(pa, pc, states)
    # A late node's commit: its own offline -> new (a regular job's, so in this day).
    late = states.filter(pc.fill_null(_late(pc, states), False))
    asked = (
        pa.table({"job_id": late["job_id"], "node": late["node"], "asked_ts": late["ts"]})
        .group_by(["job_id", "node"])
        .aggregate([("asked_ts", "min")])
        .rename_columns({"asked_ts_min": "asked_ts"})
        .select(["job_id", "node", "asked_ts"])
    )
    mark_ts = marks["ts"]
    firsts = pa.table(
        {
            "job_id": marks["job_id"],
            "voting_ts": pc.if_else(pc.equal(marks["state"], "voting"), mark_ts, None),
            "running_ts": pc.if_else(pc.equal(marks["state"], "running"), mark_ts, None),
        }
    )
    firsts = firsts.group_by(["job_id"]).aggregate([("voting_ts", "min"), ("running_ts", "min")])
    firsts = firsts.rename_columns(
        {"voting_ts_min": "voting_ts", "running_ts_min": "running_ts"}
    ).select(["job_id", "voting_ts", "running_ts"])
    base = pa.table(
        {
            "job_id": states["job_id"],
            "command": states["command"],
            "node": states["node"],
            "state": states["state"],
            "prev_state": states["prev_state"],
            "ts": states["ts"],
            "duration_ms": states["duration_ms"],
        }
    )
    joined = base.join(firsts, keys="job_id", join_type="left outer").join(
        asked, keys=["job_id", "node"], join_type="left outer"
    )
    prev, state, ts = joined["prev_state"], joined["state"], joined["ts"]
    sent = pc.coalesce(joined["asked_ts"], joined["voting_ts"])

    def yes(mask: Any) -> Any:
        return pc.fill_null(mask, False)

    vote = yes(
        pc.and_(
            pc.and_(pc.equal(prev, "new"), pc.is_in(state, value_set=_strings(VOTED))),
            pc.is_valid(sent),
        )
    )
    took = pc.coalesce(joined["duration_ms"], pc.subtract(ts, joined["running_ts"]))
    end = yes(
        pc.and_(
            pc.and_(
                pc.is_in(prev, value_set=_strings(("ready", "running"))),
                pc.is_in(state, value_set=_strings(RUN_ENDS)),
            ),
            pc.is_valid(took),
        )
    )
    ms = pc.max_element_wise(pc.if_else(vote, pc.subtract(ts, sent), took), 0)
    metric = pc.if_else(
        vote, pa.scalar(VOTE, pa.int8()), pc.if_else(end, pa.scalar(RUN, pa.int8()), None)
    )
    table = pa.table(
        {"metric": metric, "command": joined["command"], "node": joined["node"], "ms": ms}
    ).filter(pc.is_valid(metric))
    schema = pa.schema(
        [("metric", pa.int8()), ("command", pa.string()), ("node", pa.string()), ("ms", pa.int64())]
    )
    return table.cast(schema)


def _write(
    out: Path,
    day: str,
    manifest: Manifest,
    write_kept: Callable[[Path], None],
    tables: dict[str, Any],
) -> None:
    _, _, pq = _arrow()
    final = folder(out, day)
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_kept(tmp / "kept.parquet")
    for name, table in tables.items():
        pq.write_table(table, tmp / f"{name}.parquet")
    (tmp / "manifest.json").write_bytes(manifest.encode())
    for path in tmp.iterdir():
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(tmp)
    remove_day(out, day)
    os.replace(tmp, final)
    fsync_dir(final.parent)


# --- keeping them up to date ---------------------------------------------------------------


@dataclass(slots=True)
class Updated:
    built: list[str] = field(default_factory=list)
    kept: int = 0  # days whose rollup was already valid
    open_days: list[str] = field(default_factory=list)  # the newest day: still being written
    not_rolled: list[str] = field(default_factory=list)  # files with other days' events
    removed: int = 0  # rollups of days that have no raw files any more
    index_rebuilt: bool = False


def index_path(out: Path) -> Path:
    return out / ROLLUPS / "jobs.db"


def open_index(out: Path) -> tuple[JobSpans, bool]:
    """The archive's job span index; rebuilt from the raw files when missing (an archive
    written before rollups, or ``--rebuild-rollups``). True if it was rebuilt."""
    path = index_path(out)
    if path.exists():
        return JobSpans(path), False
    tmp = path.with_name(f".tmp-jobs-{os.getpid()}.db")
    jobspans.remove(tmp)
    with JobSpans(tmp) as spans:
        for day in raw_days(out):
            spans.widen(_day_spans(out, day))
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{tmp}{suffix}")
    os.replace(tmp, path)
    return JobSpans(path), True


def _day_spans(out: Path, day: str) -> dict[str, jobspans.Span]:
    """The spans of the jobs in one day's raw files; a row filed under another day than
    its time's stretches its job over both (such a day is never rolled up)."""
    _, pc, pq = _arrow()
    start = day_ms(day)
    spans: dict[str, jobspans.Span] = {}
    for name in raw_files(out, day):
        t = pq.read_table(out / f"date={day}" / name, columns=["ts", "kind", "job_id"])
        t = t.filter(
            pc.fill_null(
                pc.and_(
                    pc.and_(pc.is_valid(t["ts"]), pc.not_equal(t["job_id"], "")),
                    pc.is_in(t["kind"], value_set=_strings(sorted(jobspans.SPAN_KINDS))),
                ),
                False,
            )
        )
        if not len(t):
            continue
        grouped = t.group_by(["job_id"]).aggregate([("ts", "min"), ("ts", "max")]).to_pylist()
        for row in grouped:
            lo, hi = row["ts_min"], row["ts_max"]
            if not start <= lo < start + DAY_MS or not start <= hi < start + DAY_MS:
                lo, hi = min(lo, start), max(hi, start)
            old = spans.get(row["job_id"])
            spans[row["job_id"]] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
    return spans


def update(
    out: Path, *, rebuild: bool = False, progress: Callable[[str], None] = lambda text: None
) -> Updated:
    """Build the rollup of every closed day that has no valid one (every closed day with
    ``rebuild``, the job span index too)."""
    result = Updated()
    rollups = out / ROLLUPS
    if rebuild and rollups.exists():
        shutil.rmtree(rollups)
    rollups.mkdir(parents=True, exist_ok=True)
    for leftover in rollups.iterdir():
        if leftover.name.startswith((".tmp-", ".old-")):
            if leftover.is_dir():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink()
    days = raw_days(out)
    for path in rollups.iterdir():
        m = DATE_RE.match(path.name)
        if m and m.group(1) not in days:
            remove_day(out, m.group(1))
            result.removed += 1
    if not days:
        return result
    spans, result.index_rebuilt = open_index(out)
    with spans:
        for day in days[:-1]:
            held = read_manifest(out, day)
            if held is not None and held.sources == raw_files(out, day):
                result.kept += 1
                continue
            built = build_day(out, day, spans.regular(day_ms(day)))
            if built is None:
                result.not_rolled.append(day)
                continue
            result.built.append(day)
            progress(f"rollup of {day}: {built.rows:,} events, {built.regular_jobs:,} jobs")
    result.open_days = days[-1:]
    return result
