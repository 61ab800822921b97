"""Following a job to its end from the CLI, and what Ctrl-C means meanwhile.

``follow`` long-polls ``job.watch`` until the job ends, with a live line on a terminal
(``pushjobs.cli.progress``; elsewhere nothing is drawn). Ctrl-C stops the following, not
the job: the job runs on the nodes, so the CLI says so and how to follow or abort it, and
exits 130 (128 + SIGINT, what a shell expects of an interrupted command). With
``abort_on_interrupt`` (``job start --abort-on-interrupt``) it aborts the job instead and
says what became of it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import typer

from pushjobs.api.client import ApiClient
from pushjobs.cli import jobview
from pushjobs.cli.render import printable
from pushjobs.errors import ApiError, PushJobsError

INTERRUPTED = 130


def keeps_running(job_id: str) -> str:
    return (
        f"interrupted: job {job_id} keeps running; follow it with: pushjobs job status "
        f"{job_id} --watch; abort it with: pushjobs job abort {job_id}"
    )


def follow(
    client: ApiClient,
    job: dict[str, Any],
    *,
    show_progress: bool,
    abort_on_interrupt: bool = False,
) -> dict[str, Any]:
    """The job once it has ended; ``typer.Exit(130)`` if the user interrupts."""
    try:
        if not (show_progress and sys.stderr.isatty()):
            return watch(client, job)
        from pushjobs.cli.progress import JobProgress

        with JobProgress(job) as line:
            return watch(client, job, line.update)
    except KeyboardInterrupt:
        raise interrupted(client, job["job_id"], abort=abort_on_interrupt) from None


def watch(
    client: ApiClient,
    job: dict[str, Any],
    seen: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Long-poll ``job`` until it ends, handing each new version to ``seen``."""
    while job["state"] not in jobview.TERMINAL:
        params = {"job_id": job["job_id"], "version": job["version"], "wait_s": 10.0}
        job = client.call("job.watch", params)["job"]
        if seen is not None:
            seen(job)
    return job


def interrupted(client: ApiClient, job_id: str, *, abort: bool) -> typer.Exit:
    """Say what an interrupt left behind (aborting the job first if asked); exit 130."""
    if not abort:
        typer.echo(keeps_running(job_id), err=True)
        return typer.Exit(INTERRUPTED)
    try:
        job = client.call("job.abort", {"job_id": job_id})["job"]
    except KeyboardInterrupt:
        typer.echo(keeps_running(job_id), err=True)
        return typer.Exit(INTERRUPTED)
    except PushJobsError as exc:
        if isinstance(exc, ApiError) and exc.code == "conflict":
            typer.echo(f"interrupted: job {job_id} had already ended", err=True)
            return typer.Exit(INTERRUPTED)
        typer.echo(f"interrupted: job {job_id} not aborted: {exc}", err=True)
        typer.echo(keeps_running(job_id), err=True)
        return typer.Exit(INTERRUPTED)
    typer.echo(
        printable(
            f"interrupted: job {job_id} aborted ({job['state']}: {jobview.summary_text(job)}); "
            f"see it with: pushjobs job status {job_id}"
        ),
        err=True,
    )
    return typer.Exit(INTERRUPTED)
