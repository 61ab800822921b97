"""``pushjobs report``: fleet reports from the archived event history, on Spark."""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import error, handle_errors, print_json
from pushjobs.config import load_config


def _ms(text: str | None, what: str) -> int | None:
    """An ISO date/time (UTC unless it says otherwise) or ms since the epoch."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        error(f"{what}: {text!r} is neither an ISO date/time (2026-11-01T12:00) nor ms")
        raise typer.Exit(int(Exit.USAGE)) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _active_session() -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


@handle_errors
def report(
    since: Annotated[
        str | None, typer.Option("--since", help="Window start: ISO date/time (UTC) or ms.")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Window end (excluded): ISO date/time or ms.")
    ] = None,
    input_dir: Annotated[
        str | None,
        typer.Option(
            "--input", help="Archived events: a directory or URL (default: \\[report] input)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Where tables, charts and report.html go.")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML with \\[report] (master, spark settings, ...)."),
    ] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master (default: \\[report] master).")
    ] = None,
    demo: Annotated[
        bool,
        typer.Option("--demo", help="Report on a generated week of a 40-node fleet instead."),
    ] = False,
    approx: Annotated[
        bool,
        typer.Option(
            "--approx",
            help="Approximate percentiles, each within 0.5% of the exact value (latencies "
            "rounded to 3 significant digits first): less work on large histories. "
            "Default: exact.",
        ),
    ] = False,
    no_rollups: Annotated[
        bool,
        typer.Option(
            "--no-rollups",
            help="Read every day's raw events, not the rollups 'pushjobs archive' keeps "
            "(the same tables, more to read).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Availability, flaps, outcomes per command and node, latency percentiles, stragglers.

    Reads the Parquet archive written by 'pushjobs archive', runs a Spark job (local mode
    unless \\[report] master says otherwise) and writes CSV and Parquet tables, PNG charts
    and one self-contained report.html to --out. Each whole day of the window that the
    archiver has rolled up is read from its rollup, the rest from raw events.

    Example: pushjobs report --since 2026-11-01 --out /tmp/fleet-report
    Try it:  pushjobs report --demo
    """
    from dataclasses import replace

    from pushjobs.pipeline import charts, output, page, spark_job, spark_rollups
    from pushjobs.pipeline.session import spark_session
    from pushjobs.pipeline.settings import PipelineConfig

    cfg = load_config(PipelineConfig, config)
    settings = cfg.report if master is None else replace(cfg.report, master=master)
    out_dir = out or settings.output
    location = input_dir or settings.input or str(cfg.archive.dir())

    def say(text: str) -> None:
        if not as_json:
            typer.echo(text, err=True)

    # A bad window is a usage error before Spark spends seconds starting.
    since_ms, until_ms = _ms(since, "--since"), _ms(until, "--until")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if demo:
            from pushjobs.pipeline.demo import history, write_parquet

            location = stack.enter_context(tempfile.TemporaryDirectory(prefix="pushjobs-demo-"))
            count = write_parquet(history(), Path(location))
            say(f"generated {count} demo events in {location} (removed afterwards)")
        elif "://" not in location and not Path(location).exists():
            error(f"no archive at {location}: run 'pushjobs archive' first, or try --demo")
            raise typer.Exit(int(Exit.NOT_FOUND))
        log_file = out_dir / "spark.log"
        say(f"starting Spark ({settings.master}; its log: {log_file}) ...")
        running = _active_session()
        spark = spark_session(settings, log_file=log_file)
        if running is None:  # a session this process already had is not ours to stop
            stack.callback(spark.stop)
        say(f"reading {location}")

        def stage(text: str) -> None:
            say(f"  {time.monotonic() - started:5.1f} s  {text}")

        gap_ms = round(settings.server_gap_s * 1000)
        if no_rollups or demo:
            raw, rolled, window = spark_job.load(spark, location, since_ms, until_ms), None, None
            said = "raw events only" + (" (--no-rollups)" if no_rollups else "")
        else:
            raw, rolled, lo, hi, said = spark_rollups.prepare(
                spark, location, since_ms, until_ms, gap_ms
            )
            window = (lo, hi)
            stage(said)
        if window is not None:
            since_ms, until_ms = window
        result = spark_job.compute(
            raw,
            since=since_ms,
            until=until_ms,
            rolled=rolled,
            straggler_factor=settings.straggler_factor,
            min_samples=settings.straggler_min_runs,
            server_gap_ms=gap_ms,
            approx=approx,
            progress=stage,
        )
        stage("writing tables, charts and the page")
    written = output.write_tables(result, out_dir)
    pngs = charts.charts(result, out_dir)
    html = page.write_html(result, out_dir, pngs)
    took = time.monotonic() - started
    if as_json:
        print_json(
            {
                **output.summary_json(result),
                "html": str(html),
                "seconds": round(took, 2),
                "read": said,
            }
        )
        return
    typer.echo(output.summary_text(result))
    typer.echo(f"read: {said}")
    typer.echo(f"\n{len(written)} tables, {len(pngs)} charts and {html} written in {took:.1f} s")
    sys.stdout.flush()
