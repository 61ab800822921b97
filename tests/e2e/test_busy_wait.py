"""``job start --busy-wait`` with real processes (issue 27, item 2): a job waits its turn
on a node busy with another job, up to a bound, instead of being refused ``busy``.

One node runs a first job that lasts until the test releases it (its command reads a FIFO
the test writes). Meanwhile: a job started without ``--busy-wait`` is refused ``busy`` as
before; one with a bound shorter than the first job ends with its node saying it was still
busy when the wait ran out; one with a long enough bound shows its node waiting in
``job status`` and runs once the first job ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.cli.exitcodes import Exit
from tests.e2e.conftest import WHITELIST, Fleet, make_fleet, run_cli
from tests.support import wait_until

NODE = "node-1"
START = ("job", "start", "stamp", NODE)


@pytest.fixture
def one_node(tmp_path: Path) -> Iterator[Fleet]:
    whitelist = {
        **WHITELIST,
        # runs until the test opens (and closes) the FIFO for writing: a job that lasts
        # exactly as long as the test wants, without a sleep on either side
        "hold": "sh -c 'cat \"$PUSHJOBS_HOME/gate\" > /dev/null'",
    }
    fleet = make_fleet(tmp_path, nodes=[NODE], whitelist=whitelist)
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def release(fleet: Fleet) -> None:
    """End the ``hold`` job: its ``cat`` reads end-of-file once the writer closes."""
    with open(fleet.root / "gate", "w"):
        pass


def stamps(fleet: Fleet) -> list[str]:
    path = fleet.root / f"stamps-{NODE}"
    return path.read_text().split() if path.exists() else []


def test_a_job_waits_its_turn_on_a_busy_node_by_option(one_node: Fleet) -> None:
    fleet = one_node
    os.mkfifo(fleet.root / "gate")
    first = fleet.start("hold", [NODE])["job_id"]
    fleet.wait_node_state(first, NODE, "running")
    config = fleet.sandbox.client_config_path

    # Without --busy-wait: refused busy at once, as before.
    code, out, _ = run_cli(config, "job", "start", "stamp", NODE)
    assert code == Exit.QUORUM_FAILED, out
    assert f"busy with job {first}" in out and "nacked" in out

    # A bound shorter than the first job: the node ends saying why, never asked to commit.
    code, out, _ = run_cli(config, "job", "start", "stamp", NODE, "--busy-wait", "1s")
    assert code == Exit.QUORUM_FAILED, out
    assert re.search(rf"still busy with job {first} after waiting [\d.]+ s \(busy wait\)", out)

    # A bound long enough: it waits, visibly, then runs once the first job ends.
    waiting = subprocess.Popen(
        [sys.executable, "-m", "pushjobs.cli.app", *START, "--busy-wait", "2m", "--json"],
        env={**os.environ, "PUSHJOBS_CONFIG": str(config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def the_waiting_job() -> str | None:
            jobs = fleet.call("job.list", {"state": "voting"})["jobs"]
            return next((j["job_id"] for j in jobs if j["command"] == "stamp"), None)

        second = wait_until(the_waiting_job, 30, 0.05)
        code, out, _ = run_cli(config, "job", "status", second)
        assert f"waiting: busy with job {first}" in out, out
        assert "waiting for busy nodes until" in out
        assert stamps(fleet) == []  # not run, not even asked
        release(fleet)
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == Exit.OK, (out, err)
    assert fleet.status(first)["state"] == "complete"
    assert stamps(fleet) == [second]


def test_a_job_started_right_after_an_abort_runs_on_the_node_still_stopping(
    one_node: Fleet,
) -> None:
    """``job abort`` then ``job start`` at once, no ``--busy-wait``: the node may still be
    stopping the aborted job when the new commit comes, and nacks it ``busy``. That job is
    over for the node, so the server tells it again to let go and asks again, instead of
    counting a no. Made certain here: the agent is paused while both commands queue, so it
    reads the commit just after the abort, its process still ending."""
    fleet = one_node
    os.mkfifo(fleet.root / "gate")
    first = fleet.start("hold", [NODE])["job_id"]
    fleet.wait_node_state(first, NODE, "running")
    agent = fleet.sandbox.procs[NODE]
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        fleet.call("job.abort", {"job_id": first})
        second = fleet.start("stamp", [NODE])["job_id"]
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    done = fleet.wait_job(second)
    assert (done["state"], done["summary"]) == ("complete", {"succeeded": 1}), done
    assert stamps(fleet) == [second]
    assert fleet.status(first)["state"] == "aborted"
    assert fleet.call("server.info", {})["stale_busy_nacks"] >= 1  # the case was met
