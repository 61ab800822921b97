"""Leftovers of a dead agent: found by pid and start time, never mistaken for a reused pid."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.journal import Journal
from agent.leftovers import kill_if_same, start_time
from tests.support import wait_until


@pytest.fixture
def group() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True, stdin=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait()


def test_a_live_process_has_a_start_time_and_a_gone_one_none(group) -> None:
    assert start_time(os.getpid()) is not None
    started = start_time(group.pid)
    assert started is not None and started >= start_time(os.getpid())  # type: ignore[operator]
    group.kill()
    group.wait()
    assert start_time(group.pid) is None


def test_only_the_same_process_is_killed(group) -> None:
    started = start_time(group.pid)
    assert started is not None
    assert not kill_if_same(group.pid, started + 1)  # the pid was reused by another process
    assert group.poll() is None
    assert kill_if_same(group.pid, started)
    wait_until(lambda: group.poll() is not None, timeout_s=5)


def test_the_journal_keeps_the_running_job_until_it_ends_across_a_reopen(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    journal.running("j1", 123, 456)
    journal.close()
    journal = Journal(tmp_path / "journal.db")  # the agent died and restarted
    assert journal.still_running() == [("j1", 123, 456)]
    journal.ended("j1")
    assert journal.still_running() == []
    journal.close()
