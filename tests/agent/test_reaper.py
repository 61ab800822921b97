"""The reaper's watchdog, as a real process: it kills what is registered when the agent goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.launcher import Launcher
from agent.reaper import TAG_VARIABLE, Reaper
from pushjobs.errors import ExecutionError
from pushjobs.protocol import messages as m
from tests.support import wait_until


def alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def agent_dies(reaper: Reaper) -> None:
    """What the kernel does to the pipe when the agent dies, however it dies."""
    assert reaper._proc.stdin is not None
    reaper._proc.stdin.close()


@pytest.fixture
def groups():
    """Two jobs-to-be, each leading its own process group; killed at the end whatever happens."""
    procs = [
        subprocess.Popen(["sleep", "60"], start_new_session=True, stdin=subprocess.DEVNULL)
        for _ in range(2)
    ]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_when_the_agent_is_gone_registered_groups_die_and_released_ones_live(groups) -> None:
    kept, released = groups
    reaper = Reaper(look_for_s=0.5)
    reaper.watch(kept.pid)
    reaper.watch(released.pid)
    reaper.release(released.pid)
    agent_dies(reaper)
    wait_until(lambda: not alive(kept), timeout_s=5)
    assert alive(released)
    assert reaper._proc.wait(timeout=10) == 0  # the watchdog exited after its work


def test_a_job_spawned_before_it_was_registered_is_killed_by_its_tag() -> None:
    reaper = Reaper(look_for_s=0.5)
    env = {**os.environ, TAG_VARIABLE: reaper.tag}
    other = {**os.environ, TAG_VARIABLE: "another-agent"}
    tagged = subprocess.Popen(["sleep", "60"], start_new_session=True, env=env)
    foreign = subprocess.Popen(["sleep", "60"], start_new_session=True, env=other)
    try:
        agent_dies(reaper)  # between the spawn and its "+PGID" line
        wait_until(lambda: not alive(tagged), timeout_s=5)
        assert reaper._proc.wait(timeout=10) == 0
        assert alive(foreign)  # another agent's job is not this watchdog's business
    finally:
        for proc in (tagged, foreign):
            proc.kill()
            proc.wait()


# A job forked in the instant the agent died: its environment is still the agent's (no tag)
# when the watchdog first looks, and the tag appears only once its slow exec is done.
SLOW_EXEC = """
import os, sys, time
os.read(0, 1)
os.close(int(sys.argv[1]))
time.sleep(0.5)  # noqa: the slow exec under test, in the child
os.execvpe("sleep", ["sleep", "60"], {**os.environ, "PUSHJOBS_AGENT_TAG": sys.argv[2]})
"""


def test_a_job_forked_as_the_agent_died_is_killed_once_its_exec_shows_the_tag() -> None:
    reaper = Reaper()
    assert reaper._proc.stdin is not None
    pipe = reaper._proc.stdin.fileno()
    forked = subprocess.Popen(
        [sys.executable, "-c", SLOW_EXEC, str(pipe), reaper.tag],
        stdin=subprocess.PIPE,
        start_new_session=True,
        pass_fds=(pipe,),
    )
    try:
        agent_dies(reaper)  # its fork still holds the pipe
        assert forked.stdin is not None
        forked.stdin.write(b"x")  # the fork goes on: closes the pipe, then execs slowly
        forked.stdin.close()
        wait_until(lambda: not alive(forked), timeout_s=15)
        assert forked.returncode == -9  # by the watchdog, through the tag only its exec gave
    finally:
        forked.kill()
        forked.wait()
        reaper._proc.wait()


def test_a_clean_stop_still_kills_what_is_registered_but_does_not_keep_looking(groups) -> None:
    reaper = Reaper(look_for_s=60)
    reaper.watch(groups[0].pid)
    reaper.close()  # waits at most 5 s for the watchdog
    assert reaper._proc.returncode == 0
    wait_until(lambda: not alive(groups[0]), timeout_s=5)


def test_garbage_on_the_pipe_changes_nothing(groups) -> None:
    first, second = groups
    reaper = Reaper(look_for_s=0.5)
    reaper._tell(b"+\n-x\nhello\n+-3\n")
    reaper.watch(first.pid)
    reaper._tell(b"+%d" % second.pid)  # an incomplete line when the agent died: ignored
    agent_dies(reaper)
    wait_until(lambda: not alive(first), timeout_s=5)
    assert reaper._proc.wait(timeout=10) == 0
    assert alive(second)


def test_a_dead_watchdog_is_reported_not_fatal(groups, caplog) -> None:
    reaper = Reaper()
    reaper._proc.kill()
    reaper._proc.wait()
    reaper.watch(groups[0].pid)  # the pipe is broken: logged, and the agent carries on
    reaper.watch(groups[0].pid)
    assert sum("watchdog is gone" in r.message for r in caplog.records) == 1
    reaper.close()


def test_a_payload_that_is_not_base64_fails_the_job_instead_of_the_agent(tmp_path: Path) -> None:
    launcher = Launcher("n1", 1024, lambda: None)
    payload = m.FilePayload(path=str(tmp_path / "f"), content_b64="not base64!", mode=0o600)
    launcher.hold(
        m.Commit(
            sender="server",
            incarnation="i",
            sequence=1,
            timestamp=1,
            node="n1",
            job_id="j1",
            command="true",
            options=m.RunOptions(timeout_s=5.0, file=payload),
        )
    )
    with pytest.raises(ExecutionError, match="bad file payload"):
        launcher.start("j1", lambda command: ["true"])
    assert not (tmp_path / "f").exists()
