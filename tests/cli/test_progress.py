"""The live line of a followed job (rich's progress, a fake clock) and the hint a failed
node's row gives."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from pushjobs.cli.jobview import node_table
from pushjobs.cli.progress import REFRESH_PER_S, JobProgress, done_and_total
from tests.support import wait_until


def job(**states: str) -> dict[str, Any]:
    summary: dict[str, int] = {}
    for s in states.values():
        summary[s] = summary.get(s, 0) + 1
    nodes = {
        name: {"state": s, "exit_status": 3 if s == "failed" else None, "reason": ""}
        for name, s in states.items()
    }
    return {"job_id": "j1", "state": "running", "nodes": nodes, "summary": summary}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120, color_system=None), out


def test_the_elapsed_time_moves_while_the_job_does_not() -> None:
    console, out = terminal()
    clock = FakeClock()
    line = JobProgress(
        job(a="running", b="running"), console=console, get_time=clock, auto_refresh=False
    )
    with line:
        line.refresh()
        assert "0:00:00" in out.getvalue()
        clock.now += 14.0
        line.refresh()
    drawn = out.getvalue()
    assert "0:00:14" in drawn
    assert "job j1 running" in drawn and "0/2" in drawn and "2 running" in drawn


def test_the_line_redraws_on_its_own_at_least_once_a_second() -> None:
    assert REFRESH_PER_S >= 1.0
    console, out = terminal()
    clock = FakeClock()
    with JobProgress(job(a="running"), console=console, get_time=clock):
        clock.now += 5.0  # no update, no refresh: only rich's own thread can draw this
        wait_until(lambda: "0:00:05" in out.getvalue(), 5.0)


def test_an_update_shows_the_new_counts() -> None:
    console, out = terminal()
    line = JobProgress(job(a="running", b="running"), console=console, auto_refresh=False)
    with line:
        line.update(job(a="succeeded", b="running") | {"state": "running"})
        line.refresh()
    assert "1/2" in out.getvalue() and "1 running, 1 succeeded" in out.getvalue()


def test_done_counts_nodes_that_ended() -> None:
    assert done_and_total(job(a="running", b="failed", c="succeeded", d="ready")) == (2, 4)
    assert done_and_total({"nodes": {}}) == (0, 0)


def test_a_failed_nodes_row_says_how_to_read_its_output() -> None:
    rows = node_table(job(a="succeeded", b="failed")).splitlines()
    assert rows[2].endswith("output: pushjobs job output j1 b --channel stderr")
    assert "job output" not in rows[1]


def test_a_servers_text_is_shown_as_is_not_read_as_markup() -> None:
    # The live line is Rich markup: a state or summary holding "[...]" (another version's
    # state, a hostile server) must show its brackets, not style or vanish.
    console, out = terminal()
    odd = job(a="running") | {"state": "[bold]odd[/bold]\nx", "summary": {"[red]x": 1}}
    line = JobProgress(odd, console=console, auto_refresh=False)
    with line:
        line.refresh()
    drawn = out.getvalue()
    assert "job j1 [bold]odd[/bold]\\nx" in drawn and "[red]x" in drawn
