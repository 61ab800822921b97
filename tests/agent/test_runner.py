from __future__ import annotations

import pytest

from agent.journal import Journal
from agent.runner import JobRunner, KillProcess, Remember, Reply, RunnerState, StartProcess
from pushjobs.errors import JournalError


def commit(r, job="j1", whitelisted=True, seen=False, now=0.0, refusal=None):
    return r.commit(job, "uptime", whitelisted=whitelisted, refusal=refusal, seen=seen, now=now)


def test_commit_run_finish():
    r = JobRunner()
    assert commit(r) == [Remember("j1"), Reply("ack_commit", "j1")]
    assert r.state is RunnerState.COMMITTED
    assert r.run("j1") == [Reply("ack_run", "j1"), StartProcess("j1")]
    assert r.state is RunnerState.RUNNING
    r.finished("j1")
    assert r.state is RunnerState.IDLE and not r.busy


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"whitelisted": False}, "command 'uptime' is not whitelisted"),
        ({"seen": True}, "job already seen on this node"),
        ({"refusal": "env LD_PRELOAD is refused"}, "env LD_PRELOAD is refused"),
    ],
)
def test_commit_refused(kwargs, reason):
    r = JobRunner()
    assert commit(r, **kwargs) == [Reply("nack_commit", "j1", reason)]
    assert r.state is RunnerState.IDLE


def test_a_busy_runner_says_busy_before_judging_the_commit():
    r = JobRunner()
    commit(r)
    assert commit(r, job="j2", refusal="env PATH is refused") == [
        Reply("nack_commit", "j2", "busy with job j1")
    ]


def test_one_job_at_a_time():
    r = JobRunner()
    commit(r)
    assert commit(r, job="j2") == [Reply("nack_commit", "j2", "busy with job j1")]
    r.run("j1")
    assert commit(r, job="j2") == [Reply("nack_commit", "j2", "busy with job j1")]


def test_repeated_messages_are_answered_without_acting_twice():
    r = JobRunner()
    commit(r)
    assert commit(r) == [Reply("ack_commit", "j1")]
    r.run("j1")
    assert r.run("j1") == [Reply("ack_run", "j1")]  # no second StartProcess


def test_run_without_commit_is_nacked():
    r = JobRunner()
    assert r.run("j9") == [Reply("nack_run", "j9", "not committed to this job")]


def test_abort_committed_and_running():
    r = JobRunner()
    commit(r)
    assert r.abort("j1") == [Reply("aborted", "j1", "abort requested")]
    assert r.state is RunnerState.IDLE
    commit(r, job="j2")
    r.run("j2")
    assert r.abort("j2", "timeout") == [KillProcess("j2", "timeout")]
    assert r.state is RunnerState.RUNNING  # until the process is gone
    assert r.abort("other") == []


def test_commit_expires_without_run():
    r = JobRunner(commit_timeout_s=10)
    commit(r, now=100.0)
    assert r.tick(109.9) == []
    assert r.tick(110.0) == [Reply("aborted", "j1", "no run before the commit timeout")]
    assert r.state is RunnerState.IDLE


def test_journal_survives_reopen(tmp_path):
    path = tmp_path / "journal.db"
    j = Journal(path)
    assert not j.seen("j1")
    j.remember("j1", 5)
    j.remember("j1", 6)  # idempotent
    j.close()
    j = Journal(path)
    assert j.seen("j1") and not j.seen("j2")
    j.close()


def test_journal_on_a_corrupt_file(tmp_path):
    path = tmp_path / "journal.db"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(JournalError, match="cannot open the job journal"):
        Journal(path)


def test_a_repeated_commit_renews_the_hold() -> None:
    r = JobRunner(commit_timeout_s=10)
    r.commit("j", "c", seen=False, now=0)
    assert r.commit("j", "c", seen=True, now=8) == [Reply("ack_commit", "j")]
    assert r.tick(12) == []
    assert r.tick(18) == [Reply("aborted", "j", "no run before the commit timeout")]
