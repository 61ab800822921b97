"""A rolling job's health signal (server/core/healthgate.py, job.py): pure, fake clock."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from pushjobs.api import methods
from pushjobs.errors import ApiError
from pushjobs.quorum import Share
from pushjobs.states import JobState, NodeState
from server.core import records
from server.core.batch import HOLD_REFRESH_MS, BatchSpec
from server.core.effects import Check, Send
from server.core.healthgate import ANSWER_GRACE_MS, HaltSpec
from server.core.job import Job
from server.core.jobparams import job_params
from server.shell.serverconfig import HaltSettings
from tests.server.test_job_batch import runs, states, voted

T0 = 1_700_000_000_000
NAMES = ["n0", "n1", "n2", "n3"]
EVERY_MS = 30_000
TIMEOUT_MS = 10_000


def halt_job(size="1", check="curl -sf http://web/health", alert=None, names=NAMES, **batch):
    options = {
        "batch": BatchSpec(Share.parse(size, "batch"), **batch).to_options(),
        "halt_if": HaltSpec(check, alert, EVERY_MS, TIMEOUT_MS).to_options(),
    }
    return Job.new(
        "j1", "deploy", names, T0, vote_timeout_ms=1000, run_timeout_ms=60_000, options=options
    )


def checks(effects):
    return [e for e in effects if isinstance(e, Check)]


def test_the_first_batch_waits_for_a_passing_check():
    job = halt_job("2")
    out = voted(job)
    assert job.state is JobState.RUNNING and runs(out) == []
    (check,) = checks(out)
    assert check.seq == 1 and check.spec.check == "curl -sf http://web/health"
    assert dict(check.env)["PUSHJOBS_JOB_ID"] == "j1"
    assert dict(check.env)["PUSHJOBS_WAITING"] == "4"
    assert job.next_deadline_ms() == T0 + 1 + TIMEOUT_MS + ANSWER_GRACE_MS  # no busy loop
    assert runs(job.health(1, True, "passed", T0 + 50)) == ["n0", "n1"]


def test_each_next_start_follows_a_check_asked_after_the_previous_start():
    job = halt_job("1")
    voted(job)
    job.health(1, True, "passed", T0 + 10)  # n0 runs
    out = job.succeeded("n0", T0 + 20)
    assert runs(out) == [] and [c.seq for c in checks(out)] == [2]
    assert dict(checks(out)[0].env)["PUSHJOBS_SUCCEEDED"] == "1"
    assert runs(job.health(2, True, "passed", T0 + 30)) == ["n1"]
    # A check answered after a start was asked before it: it clears nothing.
    out = job.succeeded("n1", T0 + 40)
    assert runs(job.health(3, True, "passed", T0 + 41)) == ["n2"]
    assert job.summary() == {"ready": 1, "succeeded": 2, "waiting": 1}


def test_a_failing_check_after_the_first_batch_halts_the_rest_and_lets_the_running_finish():
    job = halt_job("2")
    voted(job)
    job.health(1, True, "passed", T0 + 10)  # n0, n1 run
    out = job.succeeded("n0", T0 + 20)  # a slot frees: a check first
    assert [c.seq for c in checks(out)] == [2]
    out = job.health(2, False, "failed (exit 22): HTTP 503", T0 + 30)
    assert runs(out) == []
    aborts = [e.node for e in out if isinstance(e, Send) and e.kind == "abort"]
    assert aborts == ["n2", "n3"]  # their commits let go
    assert states(job, NodeState.SKIPPED) == ["n2", "n3"]
    reason = "halt-if check 'curl -sf http://web/health': failed (exit 22): HTTP 503"
    assert job.nodes["n2"].reason == f"not started: {reason}"
    assert job.halt_reason == reason
    assert job.state is JobState.RUNNING  # n1 finishes
    job.succeeded("n1", T0 + 40)
    assert job.state is JobState.HALTED
    assert job.summary() == {"skipped": 2, "succeeded": 2}
    assert job.snapshot(nodes=False)["halt_reason"] == reason


def test_the_interval_check_runs_while_nodes_wait_and_halts_on_failure():
    job = halt_job("1")
    voted(job)
    job.health(1, True, "passed", T0 + 10)  # n0 runs, for long
    assert job.next_deadline_ms() == T0 + 1 + HOLD_REFRESH_MS  # the waiting's commits again
    assert checks(job.tick(T0 + 1 + HOLD_REFRESH_MS)) == []
    assert job.next_deadline_ms() == T0 + 1 + EVERY_MS  # the interval, from the last ask
    out = job.tick(T0 + 1 + EVERY_MS)
    assert [c.seq for c in checks(out)] == [2]
    out = job.health(2, False, "firing (1 alert)", T0 + EVERY_MS + 5)
    assert states(job, NodeState.SKIPPED) == ["n1", "n2", "n3"]
    job.succeeded("n0", T0 + EVERY_MS + 6)
    assert job.state is JobState.HALTED


def test_no_interval_check_once_every_node_had_its_turn():
    job = halt_job("4")
    voted(job)
    job.health(1, True, "passed", T0 + 10)
    assert job.count(NodeState.WAITING) == 0
    assert job.next_deadline_ms() == T0 + 10 + 60_000  # only the run timeout
    assert checks(job.tick(T0 + 1 + EVERY_MS)) == []
    # A late failure, nothing left to stop: the job completes as any other.
    assert job.health(1, False, "late", T0 + 20) == []
    for name in NAMES:
        job.succeeded(name, T0 + 30)
    assert job.state is JobState.COMPLETE and job.halt_reason is None


def test_an_unanswered_check_halts_past_its_timeout_and_grace():
    job = halt_job("1")
    voted(job)
    due = T0 + 1 + TIMEOUT_MS + ANSWER_GRACE_MS
    assert job.tick(due - 1) == []
    out = job.tick(due)
    assert states(job, NodeState.SKIPPED) == NAMES
    assert job.state is JobState.HALTED  # nothing ran: halted at once
    assert "no answer within 15 s" in (job.halt_reason or "")
    assert checks(out) == []


def test_stale_and_late_answers_change_nothing():
    job = halt_job("1")
    voted(job)
    assert job.health(7, False, "not mine", T0 + 5) == []
    assert job.count(NodeState.WAITING) == 4
    job.abort(T0 + 6)
    assert job.health(1, False, "too late", T0 + 7) == []
    assert job.state is JobState.ABORTED and job.halt_reason is None


def test_a_restored_job_asks_a_fresh_check_before_its_next_start():
    job = halt_job("1")
    voted(job)
    job.health(1, True, "passed", T0 + 10)
    job.succeeded("n0", T0 + 20)  # check 2 asked, never answered: the leader died
    restored = Job.restore(job.snapshot())
    out = restored.tick(T0 + 21)
    assert runs(out) == [] and [c.seq for c in checks(out)] == [1]
    assert runs(restored.health(1, True, "passed", T0 + 30)) == ["n1"]
    # Every node still runs exactly once.
    sent = Counter(["n0", "n1"])
    now = T0 + 40
    for _ in NAMES:
        for name in states(restored, NodeState.READY):
            now += 1
            for check in checks(restored.succeeded(name, now)):
                sent.update(runs(restored.health(check.seq, True, "passed", now)))
    assert sent == Counter(NAMES) and restored.state is JobState.COMPLETE


def test_a_halt_survives_a_restore_and_its_reason_is_in_the_job_state_event():
    job = halt_job("2")
    voted(job)
    job.health(1, True, "passed", T0 + 10)
    job.succeeded("n0", T0 + 20)
    job.health(2, False, "failed (exit 1)", T0 + 30)
    restored = Job.restore(job.snapshot())
    assert restored.halt_reason == job.halt_reason
    assert checks(restored.tick(T0 + 31 + EVERY_MS)) == []  # nothing left to start
    changes = restored.succeeded("n1", T0 + 40)
    events = [orjson.loads(raw) for _, raw in records.job_events(changes, {"j1": restored}, "s")]
    (moved,) = [e for e in events if e["kind"] == "job_state"]
    assert moved["state"] == "halted" and moved["halt_reason"] == job.halt_reason


def test_the_failure_budget_halts_with_its_reason_too():
    options = {"batch": BatchSpec(Share.parse("1", "batch"), 0, Share.parse("1", "f")).to_options()}
    job = Job.new("j1", "deploy", NAMES, T0, vote_timeout_ms=1000, options=options)
    voted(job)
    job.failed("n0", T0 + 5, 1, "exit status 1")
    assert job.state is JobState.HALTED
    assert job.halt_reason == "the failure budget is spent"


def test_offline_nodes_waited_for_are_skipped_when_the_signal_fires():
    options = {
        "batch": BatchSpec(Share.parse("1", "batch")).to_options(),
        "halt_if": HaltSpec(None, "HighErrorRate", EVERY_MS, TIMEOUT_MS).to_options(),
    }
    job = Job.new(
        "j1", "deploy", NAMES, T0, vote_timeout_ms=1000, options=options, offline_wait_ms=3_600_000
    )
    job.start(["n0", "n1"], T0)
    job.ack_commit("n0", T0 + 1)
    out = job.ack_commit("n1", T0 + 1)
    assert states(job, NodeState.OFFLINE) == ["n2", "n3"]
    job.health(checks(out)[0].seq, True, "not firing", T0 + 2)
    out = job.succeeded("n0", T0 + 3)
    job.health(checks(out)[0].seq, False, "firing (2 alerts): severity=page", T0 + 4)
    assert states(job, NodeState.SKIPPED) == ["n1", "n2", "n3"]
    assert job.state is JobState.HALTED
    assert "Prometheus alert 'HighErrorRate': firing" in (job.halt_reason or "")


# --- the request and the server's settings -----------------------------------------------


def params(**extra):
    return {"command": "deploy", "nodes": ["web-*"], "batch": "1", **extra}


def test_job_params_keep_the_signal_and_refuse_what_makes_no_sense():
    kept = job_params(params(halt_if="check-web", halt_check_every_s=5), None)["options"]
    assert kept["halt_if"] == {
        "check": "check-web",
        "alert": None,
        "every_s": 5.0,
        "timeout_s": 10.0,
    }
    for bad in (
        {"halt_if": "x", "halt_if_alert": "y"},
        {"halt_check_every_s": 5},
        {"halt_if": ""},
        {"halt_if": "x", "halt_check_every_s": 0.5},
        {"halt_if": "x", "halt_check_timeout_s": 0},
        {"halt_if": "x", "halt_check_timeout_s": float("nan")},
        {"halt_if_alert": "a\nb"},
        {"halt_if": "x" * 5000},
    ):
        with pytest.raises(ApiError) as err:
            job_params(params(**bad), None)
        assert err.value.code == methods.BAD_REQUEST, bad
    with pytest.raises(ApiError, match="need 'batch'"):
        job_params({"command": "deploy", "nodes": ["a"], "halt_if": "x"}, None)


def test_the_server_runs_only_the_checks_it_lists_exactly():
    settings = HaltSettings(checks=("curl -sf http://web/health",))
    assert settings.refusal(None) is None
    assert settings.refusal({"check": "curl -sf http://web/health"}) is None
    refused = settings.refusal({"check": "curl -sf http://web/health; rm -rf /"})
    assert refused is not None and "does not run the check" in refused
    assert "lists none" in (HaltSettings().refusal({"check": "true"}) or "")
    assert "prometheus_url" in (settings.refusal({"alert": "HighErrorRate"}) or "")
    assert HaltSettings(prometheus_url="http://p:9090").refusal({"alert": "A"}) is None
    assert dict(HaltSettings(prometheus_url="ftp://x", max_running=0).check()).keys() == {
        "prometheus_url",
        "max_running",
    }
