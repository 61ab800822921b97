"""What ``job.start`` (and a schedule's job) may hold: ``server.core.jobparams`` refuses, with
``bad_request``, what would stop the server or fail every node (pure)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pushjobs.api import methods
from pushjobs.errors import ApiError
from pushjobs.quorum import MAX_COUNT, Quorum, Share
from server.core.jobparams import MAX_SECONDS, job_params
from server.front import schedmethods

JOB = {"command": "true", "nodes": ["node-1"]}


def refused(params: dict[str, Any], limit: int = 65_536) -> str:
    with pytest.raises(ApiError) as caught:
        job_params({**JOB, **params}, None, limit)
    assert caught.value.code == methods.BAD_REQUEST
    return str(caught.value)


@pytest.mark.parametrize("name", ["timeout_s", "vote_timeout_s", "batch_wait_s"])
@pytest.mark.parametrize("value", [1e17, 1e308, math.inf, math.nan, MAX_SECONDS + 1])
def test_a_time_beyond_a_year_or_not_a_number_is_refused(name: str, value: float) -> None:
    extra = {"batch": "1"} if name == "batch_wait_s" else {}
    assert "at most a year" in refused({name: value, **extra})


def test_a_year_is_allowed() -> None:
    assert job_params({**JOB, "timeout_s": MAX_SECONDS}, None)["timeout_s"] == MAX_SECONDS


@pytest.mark.parametrize(
    "params",
    [
        {"command": "tr\0ue"},
        {"env": {"X": "a\0b"}},
        {"cwd": "/tmp\0/x"},
    ],
)
def test_a_nul_in_what_reaches_a_program_is_refused(params: dict[str, Any]) -> None:
    assert "NUL" in refused(params)


def test_a_job_too_large_for_a_commit_is_refused_saying_how_large() -> None:
    message = refused({"env": {"X": "a" * 2_000}}, limit=2_048)
    assert "a commit holds at most 1,024" in message and "2,0" in message
    assert job_params({**JOB, "env": {"X": "a" * 500}}, None, 2_048)["options"]["env"]


@pytest.mark.parametrize("text", ["99999999999999999999", str(MAX_COUNT + 1)])
def test_counts_beyond_any_fleet_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="at most 1,000,000"):
        Quorum.parse(text)
    with pytest.raises(ValueError, match="at most 1,000,000"):
        Share.parse(text, "batch")
    assert "batch must be a count" in refused({"batch": text})
    assert Share.parse(str(MAX_COUNT), "batch").count == MAX_COUNT


@pytest.mark.parametrize("in_s", [1e17, 1e308, math.inf, math.nan])
def test_a_schedule_beyond_a_century_is_refused(in_s: float) -> None:
    with pytest.raises(ApiError, match="at most a century"):
        schedmethods.trigger({"in_s": in_s}, 1_700_000_000_000)
