"""Ctrl-C while the CLI follows a job, through the real ``pushjobs`` command against a real
fleet: the job keeps running and the CLI says how to follow or abort it (exit 130), or it
aborts the job when asked to; and what a pipe gets from ``job start`` stays as it was."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Fleet, make_fleet
from tests.support import wait_until

PUSHJOBS = shutil.which("pushjobs", path=os.path.dirname(sys.executable)) or "pushjobs"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path_factory.mktemp("interrupt"), nodes=["node-1", "node-2"])
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def spawn(fleet: Fleet, *args: str) -> subprocess.Popen[str]:
    wait_until(lambda: parked(fleet) == 0, 20.0, 0.05)
    return subprocess.Popen(
        [PUSHJOBS, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=fleet.sandbox.env(),
    )


def running_job(fleet: Fleet, before: set[str]) -> str:
    """The id of the job the CLI started, once every node runs it."""

    def started() -> str | None:
        for job in fleet.call("job.list", {"state": "running"})["jobs"]:
            nodes = fleet.status(job["job_id"])["nodes"].values()
            if job["job_id"] not in before and all(n["state"] == "running" for n in nodes):
                return str(job["job_id"])
        return None

    return wait_until(started, 20.0, 0.05)


def parked(fleet: Fleet) -> int:
    return int(fleet.call("server.info")["watches"]["parked"])


def watching(fleet: Fleet) -> None:
    """Wait till the CLI holds a watch on the server: by then Python handles SIGINT (sent
    earlier, it would kill the process outright). Each test starts with none parked: a
    job's end answers the watches left by an earlier test's CLI."""
    wait_until(lambda: parked(fleet) >= 1, 20.0, 0.05)


def job_ids(fleet: Fleet) -> set[str]:
    return {j["job_id"] for j in fleet.call("job.list", {"limit": 1000})["jobs"]}


def interrupt(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def stop(fleet: Fleet, proc: subprocess.Popen[str], job_id: str | None) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    # Its pipes too: left open, a failure here surfaced in a later test as an unclosed file.
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    if job_id is not None and fleet.status(job_id)["state"] == "running":
        fleet.call("job.abort", {"job_id": job_id})
    if job_id is not None:
        fleet.wait_job(job_id)


def test_ctrl_c_in_job_start_leaves_the_job_running_and_says_how_to_follow_it(
    fleet: Fleet,
) -> None:
    before = job_ids(fleet)
    # The module's fleet is shared: a node may still be stopping the last test's job when
    # this one starts (the job ends once the abort is decided, its nodes a moment later):
    # each job waits its turn on a busy node (--busy-wait) instead of meeting `busy`.
    proc = spawn(fleet, "job", "start", "sleeper", "node-*", "--busy-wait", "20s")
    job_id = None
    try:
        job_id = running_job(fleet, before)
        watching(fleet)
        code, _, err = interrupt(proc)
        assert code == 130
        assert err.strip().splitlines()[-1] == (
            f"interrupted: job {job_id} keeps running; follow it with: pushjobs job status "
            f"{job_id} --watch; abort it with: pushjobs job abort {job_id}"
        )
        assert "Traceback" not in err
        assert fleet.status(job_id)["state"] == "running"
    finally:
        stop(fleet, proc, job_id)


def test_ctrl_c_in_job_status_watch_says_the_same(fleet: Fleet) -> None:
    job_id = fleet.start("sleeper", ["node-1"], busy_wait_s=20.0)["job_id"]
    proc = spawn(fleet, "job", "status", job_id, "--watch")
    try:
        fleet.wait_node_state(job_id, "node-1", "running")
        watching(fleet)
        code, out, err = interrupt(proc)
        assert code == 130 and out == ""
        assert f"interrupted: job {job_id} keeps running" in err
        assert f"pushjobs job abort {job_id}" in err
        assert fleet.status(job_id)["state"] == "running"
    finally:
        stop(fleet, proc, job_id)


def test_abort_on_interrupt_aborts_the_job(fleet: Fleet) -> None:
    before = job_ids(fleet)
    proc = spawn(
        fleet, "job", "start", "sleeper", "node-*", "--abort-on-interrupt", "--busy-wait", "20s"
    )
    job_id = None
    try:
        job_id = running_job(fleet, before)
        watching(fleet)
        code, _, err = interrupt(proc)
        assert code == 130
        assert f"interrupted: job {job_id} aborted" in err
        assert fleet.wait_job(job_id)["state"] == "aborted"
    finally:
        stop(fleet, proc, job_id)
