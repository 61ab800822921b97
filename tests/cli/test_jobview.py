"""Exit codes and rendering of a job: one case per outcome."""

from __future__ import annotations

from typing import Any

import pytest

from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.job_commands import job_params
from pushjobs.cli.jobview import (
    exit_code_for,
    headline,
    local_time,
    node_table,
    progress_line,
    summary_text,
)


def job(state: str, *node_states: str) -> dict[str, Any]:
    nodes = {
        f"n{i}": {"state": s, "exit_status": 0 if s == "succeeded" else None, "reason": ""}
        for i, s in enumerate(node_states)
    }
    summary: dict[str, int] = {}
    for s in node_states:
        summary[s] = summary.get(s, 0) + 1
    return {"job_id": "j1", "state": state, "nodes": nodes, "summary": summary}


@pytest.mark.parametrize(
    ("state", "nodes", "code"),
    [
        ("complete", ("succeeded", "succeeded"), Exit.OK),
        ("complete", ("succeeded", "failed"), Exit.FAILED),
        ("complete", ("succeeded", "crashed"), Exit.FAILED),
        ("complete", ("succeeded", "unavailable"), Exit.FAILED),
        ("quorum_failed", ("was_ready", "nacked"), Exit.QUORUM_FAILED),
        ("timed_out", ("succeeded", "timed_out"), Exit.TIMED_OUT),
        ("aborted", ("aborted",), Exit.ABORTED),
        ("crashed", ("crashed",), Exit.FAILED),
        ("running", ("running",), Exit.ERROR),
    ],
)
def test_exit_code_for_every_outcome(state: str, nodes: tuple[str, ...], code: Exit) -> None:
    assert exit_code_for(job(state, *nodes)) == code


def test_rendering_names_every_node_and_counts() -> None:
    j = job("running", "succeeded", "running", "running")
    assert summary_text(j) == "2 running, 1 succeeded"
    assert progress_line(j, 1.25) == "job j1 running   1.2s: 2 running, 1 succeeded"
    lines = node_table(j).splitlines()
    assert lines[0].split() == ["NODE", "STATE", "EXIT", "REASON"]
    assert [line.split()[0] for line in lines[1:]] == ["n0", "n1", "n2"]


def test_a_job_waiting_for_offline_nodes_says_how_many_and_until_when() -> None:
    j = job("running", "succeeded", "offline", "offline")
    j["offline_until_ms"] = 1_700_000_000_000
    until = local_time(1_700_000_000_000)
    assert (
        headline(j)
        == f"job j1 running: 2 offline, 1 succeeded; offline nodes waited for until {until}"
    )
    assert "waited for" not in headline(job("running", "succeeded"))  # none waits


def test_offline_wait_is_a_duration_sent_in_seconds() -> None:
    params = job_params(
        "true",
        ["laptop-*"],
        quorum="100%",
        timeout=None,
        vote_timeout=None,
        capture=False,
        cwd=None,
        env=None,
        secret_env=None,
        env_file=None,
        batch=None,
        batch_wait=None,
        max_failures=None,
        offline_wait="1h30m",
    )
    assert params["offline_wait_s"] == 5400
