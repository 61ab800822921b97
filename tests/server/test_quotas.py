"""What one writer key can make the server hold and write: the token bucket per caller
(server/core/quotas.py), the unfinished jobs per caller and the options bytes of finished jobs
(server/core/coordinator.py), and the refusals ``job.start`` and ``schedule.add`` answer
(server/front/handlers.py). Time is a fake clock throughout."""

from __future__ import annotations

import re
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.messages import AckCommit, AckRun, JobOutput, Succeeded
from pushjobs.quorum import Quorum
from server.core.coordinator import Coordinator
from server.core.jobparams import JobRequest
from server.core.quotas import RateQuota
from server.front.handlers import ApiHandlers
from server.shell.serverconfig import JobSettings

T0 = 1_700_000_000_000
ENV_60K = {"X": "a" * 60_000}

# --- the bucket -----------------------------------------------------------------------------


def test_a_burst_is_taken_then_one_token_per_interval() -> None:
    quota = RateQuota(per_minute=60, burst=3)  # a token a second
    assert [quota.take("w", 0) for _ in range(3)] == [0, 0, 0]
    assert quota.take("w", 0) == 1000
    assert quota.take("w", 400) == 600  # a refused request takes nothing
    assert quota.take("w", 1000) == 0
    assert quota.take("w", 1000) == 1000


def test_callers_have_buckets_of_their_own() -> None:
    quota = RateQuota(per_minute=6, burst=1)
    assert quota.take("a", 0) == 0
    assert quota.take("a", 0) == 10_000
    assert quota.take("b", 0) == 0


def test_a_bucket_refills_up_to_the_burst_and_no_further() -> None:
    quota = RateQuota(per_minute=60, burst=2)
    quota.take("w", 0)
    quota.take("w", 0)
    assert quota.tokens("w", 3_600_000) == 2.0  # an idle hour is worth a burst, not 3,600
    assert [quota.take("w", 3_600_000) for _ in range(3)] == [0, 0, 1000]


def test_time_going_back_refills_nothing() -> None:
    quota = RateQuota(per_minute=60, burst=1)
    quota.take("w", 10_000)
    assert quota.take("w", 5_000) == 1000
    assert quota.take("w", 11_000) == 0  # and the bucket did not lose its place either


def test_full_buckets_are_forgotten_when_the_table_grows() -> None:
    quota = RateQuota(per_minute=60, burst=1, max_callers=2)
    quota.take("a", 0)
    quota.take("b", 0)
    quota.take("c", 500)  # over the size: a and b are not full yet, so they stay
    assert len(quota) == 3 and quota.take("a", 500) == 500
    quota.take("d", 1000)
    quota.take("e", 100_000)  # over twice the size: every bucket but the new one is full
    assert len(quota) == 1 and quota.take("a", 100_000) == 0


@pytest.mark.parametrize(("per_minute", "burst"), [(0, 1), (-1, 1), (60, 0)])
def test_a_quota_that_would_refuse_everything_is_a_programming_error(
    per_minute: float, burst: int
) -> None:
    with pytest.raises(ValueError):
        RateQuota(per_minute, burst)


# --- the coordinator's counts ------------------------------------------------------------------


def submit(
    coord: Coordinator,
    job_id: str,
    *,
    by: str = "alice",
    online: tuple[str, ...] = ("n1",),
    options: dict[str, Any] | None = None,
) -> None:
    coord.submit(
        job_id,
        "true",
        ["n1"],
        online,
        T0,
        quorum=Quorum(),
        vote_timeout_ms=1000,
        run_timeout_ms=5000,
        options=options or {},
        requested_by=by,
    )


def test_unfinished_jobs_are_counted_per_caller_until_they_end() -> None:
    coord = Coordinator()
    submit(coord, "a1")
    submit(coord, "a2")
    submit(coord, "b1", by="bob")
    submit(coord, "a3", online=())  # nobody online: it ends at once
    assert (coord.unfinished_by("alice"), coord.unfinished_by("bob")) == (2, 1)
    coord.abort("a1", T0 + 1, "test")
    coord.tick(T0 + 1000)  # the others' votes time out
    assert (coord.unfinished_by("alice"), coord.unfinished_by("bob")) == (0, 0)


def test_restored_jobs_are_counted_as_the_log_has_them() -> None:
    first = Coordinator()
    submit(first, "a1")
    submit(first, "a2", online=())
    second = Coordinator()
    for job_id in ("a1", "a2"):
        second.restore(first.jobs[job_id], 1)
    assert second.unfinished_by("alice") == 1


def test_a_job_ended_outside_the_coordinator_and_filed_again_is_counted_once() -> None:
    coord = Coordinator()
    submit(coord, "a1")
    job = coord.jobs["a1"]
    coord.restore(job, 2)  # filed again while active: still one
    assert coord.unfinished_by("alice") == 1
    job.crash(T0 + 1, "test")  # ended outside the coordinator, then filed again
    coord.restore(job, 3)
    assert coord.unfinished_by("alice") == 0


def test_finished_jobs_are_also_bounded_by_their_options_bytes() -> None:
    coord = Coordinator(keep_finished=10_000, keep_finished_option_bytes=150_000)
    for i in range(5):
        submit(coord, f"big{i}", online=(), options={"env": ENV_60K})
    # Two 60 KB envs fit 150,000 bytes; the third pushed the oldest out, and so on.
    assert sorted(coord.jobs) == ["big3", "big4"]
    submit(coord, "live", options={"env": ENV_60K})  # not finished: not counted, not evicted
    submit(coord, "small", online=())
    assert sorted(coord.jobs) == ["big3", "big4", "live", "small"]
    coord.abort("live", T0 + 1, "test")
    assert sorted(coord.jobs) == ["big4", "live", "small"]


def test_one_finished_job_over_the_bytes_bound_is_still_kept() -> None:
    coord = Coordinator(keep_finished_option_bytes=1000)
    submit(coord, "small", online=())
    submit(coord, "big", online=(), options={"env": ENV_60K})
    assert sorted(coord.jobs) == ["big"]  # the newest is kept, so job status can show it


def run_with_output(coord: Coordinator, job_id: str, stdout: str | None = None) -> None:
    """A one-node job that succeeds with captured output (by default, its job id)."""
    submit(coord, job_id)
    reply: dict[str, Any] = {"job_id": job_id, "sender": "n1", "incarnation": "i", "timestamp": T0}
    coord.reply(AckCommit(sequence=1, **reply), T0)
    coord.reply(AckRun(sequence=2, **reply), T0)
    output = JobOutput(stdout=job_id if stdout is None else stdout, stderr="e" * 1000)
    coord.reply(Succeeded(sequence=3, exit_status=0, duration_ms=1, output=output, **reply), T0)


def test_a_forgotten_jobs_outputs_go_with_it_and_only_its() -> None:
    coord = Coordinator(keep_finished=2)
    for job_id in ("j1", "j2", "j3"):
        run_with_output(coord, job_id)
    assert sorted(coord.outputs) == [("j2", "n1"), ("j3", "n1")]
    assert coord.outputs[("j3", "n1")].output.stdout == "j3"


# --- the API's refusals --------------------------------------------------------------------


class Backend:
    """What ``job.start`` and the bounds use: a real coordinator, a fake clock."""

    def __init__(self, settings: JobSettings, roles: dict[str, str]) -> None:
        self.coordinator = Coordinator()
        self.clock = FakeClock()
        self.jobs = SimpleNamespace(
            settings=settings, sender=SimpleNamespace(secrets=None, limits=Limits())
        )
        self.registry = SimpleNamespace(
            find=lambda name: SimpleNamespace(role=roles[name]) if name in roles else None
        )
        self.started = 0
        self.api_drops: Counter[str] = Counter()

    def start_job(self, request: JobRequest, caller: str) -> str:
        self.started += 1
        job_id = f"j{self.started}"
        self.coordinator.submit(
            job_id,
            request.command,
            ["n1"],
            ["n1"],  # online: the job stays unfinished until the test ends it
            self.clock.wall_ms(),
            quorum=request.quorum,
            vote_timeout_ms=1000,
            run_timeout_ms=5000,
            options=request.options,
            requested_by=caller,
        )
        return job_id


def handlers(**settings: Any) -> tuple[ApiHandlers, Backend]:
    roles = {"writer": "writer", "other": "writer", "root": "admin"}
    backend = Backend(JobSettings(**settings), roles)
    return ApiHandlers(backend), backend  # type: ignore[arg-type]


def start(api: ApiHandlers, caller: str) -> str:
    reply = api.handle("job.start", {"command": "true", "nodes": ["n1"]}, caller)
    return str(reply["job"]["job_id"])


def test_one_job_more_than_a_callers_unfinished_bound_is_refused_busy() -> None:
    api, backend = handlers(max_active_jobs_per_caller=2)
    first = start(api, "writer")
    start(api, "writer")
    with pytest.raises(ApiError) as refused:
        start(api, "writer")
    assert refused.value.code == "busy" and backend.started == 2
    assert backend.api_drops == {"writer_bounds": 1}  # counted where an operator looks
    assert "writer has 2 jobs not finished" in str(refused.value)
    assert "jobs.max_active_jobs_per_caller" in str(refused.value)
    start(api, "other")  # another writer's jobs are its own
    backend.coordinator.abort(first, backend.clock.wall_ms(), "test")
    start(api, "writer")  # one ended: room for one more


def test_starts_beyond_the_rate_are_refused_with_when_to_retry() -> None:
    api, backend = handlers(job_starts_per_minute_per_caller=12, job_start_burst_per_caller=2)
    start(api, "writer")
    start(api, "writer")
    with pytest.raises(ApiError) as refused:
        start(api, "writer")
    assert refused.value.code == "busy" and backend.started == 2
    message = str(refused.value)
    assert "jobs.job_starts_per_minute_per_caller" in message
    retry_s = float(re.findall(r"retry in ([0-9.]+) s", message)[0])
    assert retry_s == 5.0  # 12 a minute
    start(api, "other")
    backend.clock.advance(retry_s)
    start(api, "writer")


def test_schedule_adds_take_from_the_same_bucket_before_anything_is_read() -> None:
    api, _ = handlers(job_starts_per_minute_per_caller=1, job_start_burst_per_caller=1)
    start(api, "writer")
    with pytest.raises(ApiError) as refused:
        api.handle("schedule.add", {}, "writer")  # refused before the missing params matter
    assert refused.value.code == "busy" and "retry in 60.0 s" in str(refused.value)


def test_admin_keys_are_not_bounded() -> None:
    api, backend = handlers(
        max_active_jobs_per_caller=1,
        job_starts_per_minute_per_caller=1,
        job_start_burst_per_caller=1,
    )
    for _ in range(5):
        start(api, "root")
    assert backend.coordinator.unfinished_by("root") == 5


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("max_active_jobs_per_caller", 0),
        ("job_starts_per_minute_per_caller", 0.0),
        ("job_starts_per_minute_per_caller", float("nan")),
        ("job_start_burst_per_caller", 0),
        ("keep_finished_option_bytes", 0),
        ("keep_finished_output_bytes", 0),
        ("schedule_fires_per_minute_per_caller", 0.0),
        ("schedule_fires_per_minute_per_caller", float("nan")),
        # inf divided by zero in the bucket, a denormal overflowed: either stopped the server.
        ("job_starts_per_minute_per_caller", float("inf")),
        ("job_starts_per_minute_per_caller", 1e-320),
        ("schedule_fires_per_minute_per_caller", float("inf")),
    ],
)
def test_bounds_that_would_refuse_everything_are_config_errors(setting: str, value: Any) -> None:
    problems = dict(JobSettings(**{setting: value}).check())
    assert setting in problems


def test_finished_jobs_are_also_bounded_by_the_output_they_captured() -> None:
    coord = Coordinator(keep_finished=10_000, keep_finished_output_bytes=70_000)
    for job_id in ("o1", "o2", "o3"):
        run_with_output(coord, job_id, stdout="x" * 30_000)  # 31,000 with its stderr
    # Two fit 70,000 characters; the third pushed the oldest out, its output with it.
    assert sorted(coord.jobs) == ["o2", "o3"]
    assert sorted(coord.outputs) == [("o2", "n1"), ("o3", "n1")]
    run_with_output(coord, "quiet", stdout="")  # 1,000: all three fit
    assert sorted(coord.jobs) == ["o2", "o3", "quiet"]
