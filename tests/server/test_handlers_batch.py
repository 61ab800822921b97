"""``job.start``'s rolling-batch params (server/front/handlers.py) and how the CLI shows a batch
job (pushjobs/cli/jobview.py): refused before a job exists, kept in the job's options."""

from __future__ import annotations

from typing import Any

import pytest

from pushjobs.cli import jobview
from pushjobs.cli.exitcodes import Exit
from pushjobs.errors import ApiError
from tests.server.test_handlers_env import BOX, Backend, start


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"batch": "0"}, "batch must be a count"),
        ({"batch": "150%"}, "batch must be a count"),
        ({"batch": True}, "batch must be a count"),
        ({"batch": [3]}, "batch must be a count"),
        ({"batch": "3", "max_failures": "0"}, "max_failures must be a count"),
        ({"batch": "3", "max_failures": 1.5}, "max_failures must be a count"),
        ({"batch": "3", "batch_wait_s": -1}, "'batch_wait_s' must be a number"),
        ({"batch": "3", "batch_wait_s": "2"}, "'batch_wait_s' must be a number"),
        ({"batch_wait_s": 2}, "need 'batch'"),
        ({"max_failures": "2"}, "need 'batch'"),
    ],
)
def test_bad_batch_params_are_refused_before_a_job_exists(
    params: dict[str, Any], message: str
) -> None:
    backend = Backend(BOX)
    with pytest.raises(ApiError, match=message) as info:
        start(backend, **params)
    assert info.value.code == "bad_request" and backend.requests == []


def test_batch_params_become_the_jobs_batch_options() -> None:
    backend = Backend(BOX)
    reply = start(backend, batch=3, batch_wait_s=1.5, max_failures="20%")
    [request] = backend.requests
    assert request.options["batch"] == {"size": "3", "wait_s": 1.5, "max_failures": "20%"}
    batch = {"window": 3, "wait_s": 1.5, "max_failures": 1, "failures": 0, "held": []}
    assert reply["job"]["batch"] == batch
    start(backend)
    assert "batch" not in backend.requests[1].options and "batch" not in backend.job.snapshot()


def node(state: str, reason: str = "") -> dict[str, Any]:
    return {"state": state, "exit_status": None, "reason": reason}


def test_status_table_shows_waiting_nodes_and_their_place_in_line() -> None:
    job = {
        "job_id": "j1",
        "state": "running",
        "summary": {"running": 1, "waiting": 2},
        "batch": {"window": 1, "wait_s": 2.0, "max_failures": 2, "failures": 1},
        # Target order, which is the order turns come in, not name order.
        "nodes": {"web-3": node("running"), "web-2": node("waiting"), "web-1": node("waiting")},
    }
    rows = [line.split() for line in jobview.node_table(job).splitlines()[1:]]
    assert rows == [
        ["web-1", "waiting", "waiting", "its", "turn:", "2", "of", "2"],
        ["web-2", "waiting", "waiting", "its", "turn:", "1", "of", "2"],
        ["web-3", "running"],
    ]
    line = jobview.progress_line(job, 1.0)
    assert line.endswith("1 running, 2 waiting; batch of 1 every 2s, 1 of 2 failures allowed")


def test_a_halted_job_is_over_and_exits_failed() -> None:
    job = {"state": "halted", "nodes": {"a": node("failed"), "b": node("skipped")}}
    assert "halted" in jobview.TERMINAL
    assert jobview.exit_code_for(job) is Exit.FAILED


def test_a_slot_held_by_a_silent_node_is_said_in_the_table_and_the_progress_line() -> None:
    job = {
        "job_id": "j1",
        "state": "running",
        "summary": {"crashed": 1, "running": 1, "waiting": 1},
        "batch": {"window": 2, "wait_s": 0, "max_failures": None, "failures": 1, "held": ["b"]},
        "nodes": {
            "a": node("running"),
            "b": node("crashed", "node went offline"),
            "c": node("waiting"),
        },
    }
    table = jobview.node_table(job)
    assert "node went offline; slot held until it is heard or its timeout" in table
    line = jobview.progress_line(job, 1.0)
    assert line.endswith("batch of 2, 1 held by silent nodes")
