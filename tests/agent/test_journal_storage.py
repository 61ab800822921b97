"""A journal that cannot be written (a full disk, a read-only file system): the agent's
writes say why, once, never raise; a commit is nacked; an outcome is held in memory.

The journal's own behaviour runs on a real tmpfs, filled (root is needed to mount; else
those tests skip); the policy (``JournalWrites``) on a stand-in journal whose writes fail.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.journal import Journal
from agent.journalwrites import JournalWrites
from agent.outbound import Outbound
from agent.runner import JobRunner, Reply, RunnerState
from pushjobs.errors import JournalError
from tests.tmpfs import fill, mounted


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path, "fs", 1 << 20) as mount:
        yield mount


def test_a_full_disk_is_named_and_an_outcome_is_held_in_memory(small_fs: Path) -> None:
    journal = Journal(small_fs / "journal.db")
    try:
        journal.remember("j0", 1)
        journal.store_outcome("j0", "succeeded", b'{"old": 1}', 1)
        filler = fill(small_fs)
        with pytest.raises(JournalError) as raised:
            journal.remember("j1", 2)
        assert str(raised.value) == f"{small_fs / 'journal.db'}: disk full"
        assert not journal.seen("j1")
        with pytest.raises(JournalError):
            journal.store_outcome("j1", "failed", b'{"new": 1}', 3)
        # Read back as if stored: a failover still gets the result.
        assert journal.outcome("j1") == ("failed", b'{"new": 1}')
        assert journal.last_outcome(0) == ("j1", "failed", b'{"new": 1}')
        assert journal.last_outcome(4) is None
        filler.unlink()
        journal.store_outcome("j1", "failed", b'{"new": 1}', 3)  # written at last
        journal.remember("j1", 2)
        assert journal.seen("j1")
    finally:
        journal.close()
    reopened = Journal(small_fs / "journal.db")
    try:
        assert reopened.outcome("j1") == ("failed", b'{"new": 1}')
    finally:
        reopened.close()


def test_a_journal_its_full_disk_keeps_from_opening_is_opened_once_it_can(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = small_fs / "journal.db"
    Journal(path).close()  # a clean close removes the write-ahead files it needs
    filler = fill(small_fs)
    with pytest.raises(JournalError, match="cannot open the job journal: disk full"):
        Journal(path)
    journal = Journal(path, wait=True)
    try:
        assert not journal.is_open
        writes = JournalWrites(journal)
        assert writes.still_running() is None
        seen, refusal = writes.seen("j1")
        assert not seen
        assert (
            refusal
            == f"the node cannot record the job: {path}: cannot open the job journal: disk full"
        )
        assert writes.remember("j1", 1) == refusal
        filler.unlink()
        assert writes.seen("j1") == (False, None)
        assert writes.remember("j1", 1) is None and journal.is_open
        assert [r.getMessage().split(":")[0] for r in caplog.records] == [
            "the job journal cannot be written",
            "the job journal can be written again",
        ]
    finally:
        journal.close()


def test_a_corrupt_journal_is_not_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(JournalError, match="cannot open the job journal"):
        Journal(path, wait=True)


class FailingJournal(Journal):
    """A real journal whose writes fail while ``full`` is set, as on a full disk."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.full = False

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        if self.full and not sql.startswith("SELECT"):
            raise JournalError(f"{self.path}: disk full")
        return super()._execute(sql, args)


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[FailingJournal]:
    journal = FailingJournal(tmp_path / "journal.db")
    yield journal
    journal.close()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_writes_never_raise_and_say_so_once_per_change(
    failing: FailingJournal, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "pushjobs.agent")
    writes = JournalWrites(failing)
    assert writes.remember("j1", 1) is None
    failing.full = True
    reason = writes.remember("j2", 2)
    assert reason == f"the node cannot record the job: {failing.path}: disk full"
    assert writes.remember("j3", 3) is not None
    writes.running("j1", 10, 11)
    writes.ended("j1")
    assert not writes.writable
    said = lines(caplog)
    assert len(said) == 1 and said[0].startswith("the job journal cannot be written: ")
    assert f"{failing.path}: disk full" in said[0]
    failing.full = False
    assert writes.remember("j4", 4) is None
    assert writes.writable
    assert lines(caplog)[1:] == [f"the job journal can be written again: {failing.path}"]


def test_an_end_recorded_on_a_full_disk_is_no_sign_of_recovery(tmp_path: Path) -> None:
    # Deleting a row that was never written succeeds on a full disk.
    journal = FailingJournal(tmp_path / "journal.db")
    try:
        writes = JournalWrites(journal)
        journal.full = True
        writes.running("j1", 10, 11)
        journal.full = False  # as the DELETE of no row would
        writes.ended("j1")
        assert not writes.writable
    finally:
        journal.close()


def test_an_outcome_that_cannot_be_stored_is_still_sent(
    failing: FailingJournal, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "pushjobs.agent")
    out = Outbound("node-1", "inc-1", "tcp://127.0.0.1:9", failing, next_beat=0.0)
    failing.full = True
    out.outcome("j1", "succeeded", {"exit_status": 0, "duration_ms": 5, "output": None}, 7)
    assert [fields["job_id"] for _, fields in out.queued] == ["j1"]
    assert any("will not survive an agent restart" in line for line in lines(caplog))
    out.queued.clear()
    out.resend_last(0)  # after a server failover
    assert [fields["job_id"] for _, fields in out.queued] == ["j1"]
    failing.full = False
    assert out.writes.remember("j2", 8) is None  # writable again: the outcome is written
    reopened = Journal(failing.path)
    try:
        assert reopened.outcome("j1") is not None
    finally:
        reopened.close()


def test_a_commit_that_cannot_be_recorded_is_nacked_and_forgotten() -> None:
    runner = JobRunner()
    runner.commit("j1", "uptime", seen=False, now=0.0)
    assert runner.unrecorded("j1", "disk full") == [Reply("nack_commit", "j1", "disk full")]
    assert runner.state is RunnerState.IDLE and runner.job_id is None
    assert runner.commit("j2", "uptime", seen=False, now=0.0)[-1] == Reply("ack_commit", "j2")
    assert runner.unrecorded("j1", "disk full") == []  # not the committed job: nothing
    assert runner.state is RunnerState.COMMITTED
