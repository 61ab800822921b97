"""The live line of a job being followed on a terminal: rich's own progress display.

Theory of operation. ``job start`` and ``job status --watch`` block in a long poll
(``job.watch`` answers on a change, or after up to 10 s), so a line drawn only when an
answer arrives would freeze for as long as nothing changes. rich's ``Progress`` redraws
from its own thread (``REFRESH_PER_S`` times a second): its elapsed-time column ticks
while the main thread waits, and each answer updates the job's state, the nodes done out
of all, and the count per state. It draws only on a terminal (the caller decides: stderr
a TTY); ``transient`` leaves nothing behind when it stops, so the table printed next is
all that stays. The clock (``get_time``) and console are injectable for tests.

rich comes with typer; it is imported only when a line is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pushjobs.cli import jobview
from pushjobs.cli.render import printable
from pushjobs.states import TERMINAL_NODE_STATES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

REFRESH_PER_S = 4.0


def done_and_total(job: Mapping[str, Any]) -> tuple[int, int]:
    """Nodes that have ended, and all the job's nodes. Pure."""
    nodes = job.get("nodes") or {}
    done = sum(1 for n in nodes.values() if n["state"] in TERMINAL_NODE_STATES)
    return done, len(nodes)


def description(job: Mapping[str, Any]) -> str:
    from rich.markup import escape

    # The line is Rich markup: a server's text is escaped so "[...]" in it shows as is.
    return escape(printable(f"job {job['job_id']} {job['state']}"))


class JobProgress:
    """One job's live line while it is followed (a context manager: drawn while inside)."""

    def __init__(
        self,
        job: Mapping[str, Any],
        *,
        console: Console | None = None,
        get_time: Callable[[], float] | None = None,
        auto_refresh: bool = True,
    ) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress: Progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[counts]}"),
            console=console if console is not None else Console(stderr=True),
            auto_refresh=auto_refresh,
            refresh_per_second=REFRESH_PER_S,
            transient=True,
            get_time=get_time,
            # Our own prints (warnings) must not be captured and redrawn by rich.
            redirect_stdout=False,
            redirect_stderr=False,
        )
        done, total = done_and_total(job)
        self.task: TaskID = self.progress.add_task(
            description(job), total=total or None, completed=done, counts=self._counts(job)
        )

    def update(self, job: Mapping[str, Any]) -> None:
        done, total = done_and_total(job)
        self.progress.update(
            self.task,
            description=description(job),
            total=total or None,
            completed=done,
            counts=self._counts(job),
        )

    def refresh(self) -> None:
        self.progress.refresh()

    @staticmethod
    def _counts(job: Mapping[str, Any]) -> str:
        from rich.markup import escape

        return escape(jobview.summary_text(job) + jobview.batch_text(job))

    def __enter__(self) -> JobProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
