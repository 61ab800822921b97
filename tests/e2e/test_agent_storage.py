"""An agent whose state directory (its job journal) is full or read-only: it does not exit.

A commit it cannot record is nacked and never run ("never run twice" holds: nothing is
acked that was not written); a job already running finishes and its result still reaches
the server; heartbeats go on throughout; once the directory takes writes again, the agent
takes jobs again without a restart. One log line says so, not a traceback.

Real server and agents; each agent's state directory on a real tmpfs of its own. Root
(or CAP_SYS_ADMIN) is needed to mount; elsewhere these tests skip and say so.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.testbed.sandbox import Sandbox
from tests.e2e.conftest import WHITELIST, Fleet
from tests.support import wait_until
from tests.tmpfs import fill, mounted, set_readonly

MOUNT_BYTES = 2 << 20


@pytest.fixture
def state_fs(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own tmpfs for the agents' state: it can be filled or made read-only."""
    with mounted(tmp_path, "statefs", MOUNT_BYTES) as mount:
        yield mount


def state_fleet(tmp_path: Path, state_fs: Path, nodes: list[str]) -> Fleet:
    sandbox = Sandbox(tmp_path / "fleet", nodes=nodes, whitelist=WHITELIST).prepare()
    for name in nodes:
        sandbox.write_agent_config(name, state_dir=str(state_fs / name))
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        sandbox.start_agents()
        fleet.wait_online()
        # A first job: the journal exists and holds something before the disk fills.
        assert fleet.wait_job(fleet.start("hello")["job_id"])["state"] == "complete"
    except BaseException:
        fleet.close()
        raise
    return fleet


def agent_log(fleet: Fleet, name: str = "node-1") -> str:
    return (fleet.root / "logs" / f"{name}.log").read_text(errors="replace")


def assert_alive_and_online(fleet: Fleet, name: str = "node-1") -> None:
    assert fleet.sandbox.procs[name].alive(), agent_log(fleet, name)
    assert fleet.node(name)["online"]


def assert_takes_jobs_again(fleet: Fleet, name: str = "node-1") -> None:
    job = fleet.wait_job(fleet.start("hello", [name])["job_id"])
    assert job["state"] == "complete", job
    assert job["nodes"][name]["state"] == "succeeded"
    text = agent_log(fleet, name)
    assert text.count("the job journal cannot be written") == 1  # not a line per attempt
    assert text.count("the job journal can be written again") == 1
    assert "Traceback" not in text
    assert fleet.sandbox.procs[name].alive()


def refused(fleet: Fleet, why: str) -> None:
    """A job started now is nacked for ``why``, and never runs; the agent stays up."""
    job = fleet.wait_job(fleet.start("stamp", ["node-1"])["job_id"])
    node = job["nodes"]["node-1"]
    assert node["state"] == "nacked", job
    assert "the node cannot record the job" in node["reason"] and why in node["reason"], node
    assert not (fleet.root / "stamps-node-1").exists()  # never ran
    # A few heartbeat intervals on, still up and online, and one line said why.
    wait_until(lambda: "the job journal cannot be written" in agent_log(fleet), 10)
    assert_alive_and_online(fleet)
    line = next(ln for ln in agent_log(fleet).splitlines() if "cannot be written" in ln)
    assert why in line and "journal.db" in line, line


def test_a_full_state_dir_nacks_new_jobs_until_space_is_freed(
    tmp_path: Path, state_fs: Path
) -> None:
    fleet = state_fleet(tmp_path, state_fs, ["node-1"])
    try:
        filler = fill(state_fs)
        refused(fleet, "disk full")
        refused(fleet, "disk full")
        assert agent_log(fleet).count("the job journal cannot be written") == 1
        filler.unlink()
        assert_takes_jobs_again(fleet)
    finally:
        fleet.close()


def test_an_agent_started_on_a_read_only_state_dir_waits_for_it(
    tmp_path: Path, state_fs: Path
) -> None:
    # A tmpfs cannot be remounted read-only while the agent holds its journal open for
    # writing (EBUSY): read-only is met at start-up, after a restart, where the journal
    # cannot even be opened.
    fleet = state_fleet(tmp_path, state_fs, ["node-1"])
    try:
        fleet.sandbox.pin_agent_port("node-1")
        # Killed with a job running: the journal keeps the job's row (the reaper ends
        # the job itself), which the restarted agent can only clear once it can write.
        job_id = fleet.start("sleeper", ["node-1"])["job_id"]
        fleet.wait_node_state(job_id, "node-1", "running")
        fleet.sandbox.kill("node-1", signal.SIGKILL)
        fleet.wait_offline("node-1")
        assert running_rows(state_fs / "node-1" / "journal.db") == 1
        set_readonly(state_fs, True)
        fleet.sandbox.start_agent("node-1")
        fleet.wait_online()
        refused(fleet, "read-only file system")
        line = next(ln for ln in agent_log(fleet).splitlines() if "cannot be written" in ln)
        assert "cannot open the job journal" in line
        set_readonly(state_fs, False)
        assert_takes_jobs_again(fleet)
        assert running_rows(state_fs / "node-1" / "journal.db") == 0
    finally:
        fleet.close()


def running_rows(journal: Path) -> int:
    with contextlib.closing(sqlite3.connect(journal)) as db:
        return int(db.execute("SELECT count(*) FROM running").fetchone()[0])


def test_a_disk_full_while_a_job_runs_still_reports_its_result(
    tmp_path: Path, state_fs: Path
) -> None:
    fleet = state_fleet(tmp_path, state_fs, ["node-1"])
    try:
        job_id = fleet.start("count-slowly", ["node-1"])["job_id"]
        fleet.wait_node_state(job_id, "node-1", "running")
        filler = fill(state_fs)
        job = fleet.wait_job(job_id)
        assert job["state"] == "complete" and job["nodes"]["node-1"]["state"] == "succeeded"
        assert (fleet.root / "count-node-1").read_text() == "x\n"
        text = agent_log(fleet)
        assert "will not survive an agent restart" in text
        assert_alive_and_online(fleet)
        filler.unlink()
        assert_takes_jobs_again(fleet)
    finally:
        fleet.close()


def test_a_disk_full_between_commit_and_run_still_runs_the_acked_job_once(
    tmp_path: Path, state_fs: Path
) -> None:
    # node-2, paused, holds the job at the commit vote: node-1 has recorded and acked
    # its commit when its disk fills, and gets the run only then.
    fleet = state_fleet(tmp_path, state_fs, ["node-1", "node-2"])
    try:
        fleet.sandbox.procs["node-2"].popen.send_signal(signal.SIGSTOP)
        try:
            # quorum 1: the job runs on node-1 once paused node-2 is found offline.
            job_id = fleet.start("stamp", quorum="1")["job_id"]
            fleet.wait_node_state(job_id, "node-1", "ready")
            filler = fill(state_fs)
            assert fleet.status(job_id)["state"] == "voting"  # no run sent before the fill
        finally:
            fleet.sandbox.procs["node-2"].popen.send_signal(signal.SIGCONT)
        job = fleet.wait_job(job_id)
        assert job["nodes"]["node-1"]["state"] == "succeeded", job
        assert (fleet.root / "stamps-node-1").read_text() == f"{job_id}\n"  # ran once
        assert_alive_and_online(fleet)
        assert "will not survive an agent restart" in agent_log(fleet)
        filler.unlink()
        assert_takes_jobs_again(fleet)
    finally:
        fleet.close()
