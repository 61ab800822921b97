"""``pushjobs archive``: copy the ``events`` topic to Parquet, incrementally, exactly once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # loaded by the commands that roll up: the rest of the CLI starts faster
    from pushjobs.pipeline import rollup

from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import error, handle_errors, print_json
from pushjobs.config import load_config
from pushjobs.log import topics as std
from pushjobs.log.factory import open_log


@handle_errors
def archive(
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML with \\[archive] and \\[log] (default: built-ins)."),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log", help="The sqlite log file (default: \\[log] path, $PUSHJOBS_LOG, ...)."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Archive directory (default: $PUSHJOBS_HOME/archive)."),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            help="The consumer group that keeps this archive's position (default: \\[archive] "
            "group, pushjobs.archiver). A new archive directory needs a group of its own.",
        ),
    ] = None,
    rebuild_rollups: Annotated[
        bool,
        typer.Option(
            "--rebuild-rollups",
            help="Rebuild every closed day's rollup (and the job span index) from the raw "
            "files in --out, then exit: reads no log.",
        ),
    ] = False,
    no_rollups: Annotated[
        bool,
        typer.Option(
            "--no-rollups",
            help="Archive without rollups, removing any kept (they would go stale; "
            "rebuilt when kept again). Default: \\[archive] rollups.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
) -> None:
    """Archive new events from the ordered log to Parquet, partitioned by date.

    Safe to run again and after a crash: it resumes from its consumer group's committed
    offset, and removes half-written files of an interrupted run first. Records that are
    not valid events go to OUT/_rejected/ with their offset and the reason. The position
    is the consumer group's, in the log: a second archive directory needs its own --group.

    Then it rolls up each closed day (every day but the newest) that has no rollup yet:
    per-day aggregates in OUT/_rollups/ from which a report computes the same tables
    while reading far less. A day whose files change (a late event) is rolled up again.

    Example: pushjobs archive --log /srv/pushjobs/log.db --out /srv/pushjobs/archive
    Example: pushjobs archive --rebuild-rollups --out /srv/pushjobs/archive
    """
    from dataclasses import replace

    from pushjobs.pipeline import rollup
    from pushjobs.pipeline.archive import Archiver, ArchiveResult
    from pushjobs.pipeline.settings import PipelineConfig

    cfg = load_config(PipelineConfig, config)
    settings = cfg.log if log is None else replace(cfg.log, path=log)
    directory = out or cfg.archive.dir()

    def progress(r: ArchiveResult) -> None:
        if not quiet:
            sys.stderr.write(f"  archived to offset {r.to_offset}: {r.archived} events\n")

    def say(text: str) -> None:
        if not quiet:
            sys.stderr.write(f"  {text}\n")

    if rebuild_rollups:
        if not directory.is_dir():
            error(f"no archive at {directory}: nothing to roll up")
            raise typer.Exit(int(Exit.NOT_FOUND))
        updated = rollup.update(directory, rebuild=True, progress=say)
        if as_json:
            print_json({"directory": str(directory), "rollups": rollup_json(updated)})
        else:
            typer.echo(rollup_text(updated, directory))
        return

    handle = open_log(replace(settings, create=False))
    try:
        topic = std.names(settings.topic_prefix).events
        archiver = Archiver(
            handle,
            topic,
            directory,
            group=group or cfg.archive.group,
            batch=cfg.archive.batch,
            on_batch=progress,
            rollups=cfg.archive.rollups and not no_rollups,
            progress=say,
        )
        result = archiver.run()
    finally:
        handle.close()
    summary = {
        "directory": str(directory),
        "group": archiver.group,
        "from_offset": result.from_offset,
        "to_offset": result.to_offset,
        "archived": result.archived,
        "rejected": result.rejected,
        "reasons": result.reasons,
        "files": result.files,
        "removed_partial": result.removed_partial,
        "lost_to_retention": result.lost_to_retention,
        "seconds": round(result.seconds, 3),
        "rollups": None if result.rollups is None else rollup_json(result.rollups),
    }
    if as_json:
        print_json(summary)
        return
    # Offsets as the file names give them: first and last, both included.
    span = (
        f"offsets {result.from_offset}..{result.to_offset - 1}"
        if result.to_offset > result.from_offset
        else "no new records"
    )
    typer.echo(
        f"{result.archived} events archived to {directory} ({span}) in {result.seconds:.2f} s"
    )
    if result.rejected:
        typer.echo(
            f"{result.rejected} records rejected (see {directory}/_rejected): {result.reasons}"
        )
    if result.rollups is not None:
        typer.echo(rollup_text(result.rollups, directory))
    if result.removed_partial:
        typer.echo(f"{result.removed_partial} files of an interrupted run removed first")
    if result.lost_to_retention:
        typer.echo(
            f"warning: {result.lost_to_retention} events were removed by retention before "
            "they could be archived; run the archiver more often than the retention period",
            err=True,
        )


def rollup_json(updated: rollup.Updated) -> dict[str, object]:
    return {
        "built": updated.built,
        "valid_already": updated.kept,
        "open": updated.open_days,
        "not_rolled": updated.not_rolled,
        "removed": updated.removed,
        "index_rebuilt": updated.index_rebuilt,
    }


def rollup_text(updated: rollup.Updated, directory: Path) -> str:
    """``rollups: 2 days built (2026-11-21 .. 2026-11-22), 28 up to date; 2026-11-23 still
    open``."""
    built = updated.built
    from pushjobs.pipeline.rollup import ROLLUPS

    text = f"rollups in {directory / ROLLUPS}: {len(built)} days built"
    if built:
        text += f" ({built[0]}{f' .. {built[-1]}' if len(built) > 1 else ''})"
    text += f", {updated.kept} up to date"
    if updated.open_days:
        text += f"; {updated.open_days[0]} still open (rolled up once a later day starts)"
    if updated.not_rolled:
        text += f"; not rolled up (files hold other days' events): {', '.join(updated.not_rolled)}"
    return text
