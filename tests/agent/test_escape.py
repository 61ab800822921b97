"""Issue 27: a job's process that leaves its process group (``setsid``, a double fork) is
killed at abort, at timeout and at the job's end, in a cgroup of its own or tracked by
ancestry and marks; what could not be killed is in the outcome, not silently left."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import procscan
from agent.cgroups import Containment, JobCgroup
from agent.executor import Execution, Outcome
from agent.reaper import TAG_VARIABLE
from tests.support import wait_until

PY = sys.executable
TAG = "escape-test-" + os.urandom(4).hex()

# The job's first process starts an escaper, writes its pid to $ESCAPER and waits.
SETSID = (
    "import os, signal, subprocess, sys\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'],"
    " start_new_session=True)\n"
    "open(os.environ['ESCAPER'], 'w').write('%d' % c.pid)\n"
    "signal.pause()\n"
)
# A daemon: fork, setsid, fork again, the middle process exits (the daemon is an orphan).
DOUBLE_FORK = (
    "import os, signal, sys\n"
    "r, w = os.pipe()\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.write(w, b'%d\\n' % os.getpid())\n"
    "        signal.pause()\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "open(os.environ['ESCAPER'], 'w').write(os.read(r, 64).decode().strip())\n"
    "if sys.argv[1] == 'wait':\n"
    "    signal.pause()\n"
)
SCRIPTS = {"setsid": [PY, "-c", SETSID], "double-fork": [PY, "-c", DOUBLE_FORK, "wait"]}


def job_env(job_id: str, escaper: Path) -> dict[str, str]:
    return {**os.environ, TAG_VARIABLE: TAG, "PUSHJOBS_JOB_ID": job_id, "ESCAPER": str(escaper)}


def left_of(job_id: str) -> set[int]:
    """Every live process carrying the job's marks: what of the job is still running."""
    marks = [f"{TAG_VARIABLE}={TAG}".encode(), f"PUSHJOBS_JOB_ID={job_id}".encode()]
    table = procscan.processes()
    return {p for p, (_, state) in table.items() if state != "Z" and procscan.is_marked(p, marks)}


@pytest.fixture
def cleanup() -> Iterator[list[int]]:
    """Pids a test saw: killed at the end whatever happened (a failing test leaves none)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(params=["ancestry", "cgroup"])
def contain(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A maker of the job's cgroup (None: tracked by ancestry); the cgroup case skips,
    saying why, where this machine gives the tests no cgroup of their own."""
    if request.param == "ancestry":
        yield lambda: None
        return
    containment = Containment.probe(TAG)
    if containment.mode != "cgroup":
        pytest.skip(f"no cgroup for jobs here: {containment.reason}")
    try:
        yield containment.new_job
    finally:
        containment.close()


@pytest.fixture
def escaper_file(tmp_path: Path) -> Path:
    return tmp_path / "escaper"


def run(
    job_id: str, argv: list[str], cgroup: JobCgroup | None, escaper: Path, **kwargs: Any
) -> tuple[Execution, queue.Queue[Outcome]]:
    done: queue.Queue[Outcome] = queue.Queue()
    kwargs.setdefault("timeout_s", 30.0)
    env = job_env(job_id, escaper)
    execution = Execution(job_id, argv, on_done=done.put, env=env, cgroup=cgroup, **kwargs)
    return execution, done


def escaper_pid(path: Path, cleanup: list[int]) -> int:
    """The escaper's pid, once the job wrote it (and killed at the test's end)."""
    pid = int(wait_until(lambda: path.exists() and path.read_text().strip(), timeout_s=10))
    cleanup.append(pid)
    return pid


def running(pid: int) -> bool:
    return procscan.processes().get(pid, (0, "Z"))[1] != "Z"


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_an_escaper_is_killed_at_abort(
    kind: str, contain: Any, cleanup: list[int], escaper_file: Path
) -> None:
    job_id = f"abort-{kind}"
    execution, done = run(job_id, SCRIPTS[kind], contain(), escaper_file)
    escaper = escaper_pid(escaper_file, cleanup)
    assert running(escaper) and running(execution.pid)
    execution.abort()
    outcome = done.get(timeout=20)
    assert outcome.status == "aborted"
    assert outcome.left_running == ()
    wait_until(lambda: not left_of(job_id), timeout_s=5)  # was: the escaper lived on
    assert not running(escaper)


@pytest.mark.parametrize("kind", sorted(SCRIPTS))
def test_an_escaper_is_killed_at_timeout(
    kind: str, contain: Any, cleanup: list[int], escaper_file: Path
) -> None:
    job_id = f"timeout-{kind}"
    execution, done = run(job_id, SCRIPTS[kind], contain(), escaper_file, timeout_s=1.0)
    escaper = escaper_pid(escaper_file, cleanup)
    outcome = done.get(timeout=20)
    assert outcome.status == "timed_out" and outcome.left_running == ()
    wait_until(lambda: not left_of(job_id), timeout_s=5)
    assert not running(escaper)
    assert execution.join(5)


def test_a_daemon_left_by_a_command_that_ended_goes_with_its_job(
    contain: Any, cleanup: list[int], escaper_file: Path
) -> None:
    job_id = "ended-double-fork"
    _, done = run(job_id, [PY, "-c", DOUBLE_FORK, "exit"], contain(), escaper_file)
    outcome = done.get(timeout=20)
    escaper = escaper_pid(escaper_file, cleanup)
    assert outcome.status == "succeeded" and outcome.left_running == ()
    wait_until(lambda: not left_of(job_id), timeout_s=5)
    assert not running(escaper)


def test_an_escaper_that_cleared_its_environment_is_killed_in_its_cgroup(
    contain: Any, cleanup: list[int], escaper_file: Path
) -> None:
    cgroup = contain()
    if cgroup is None:
        pytest.skip("only a cgroup (or the agent as subreaper, tests/e2e) finds it")
    script = f"(env -i setsid sh -c 'echo $$ > {escaper_file}; exec sleep 60' &); exec sleep 60"
    execution, done = run("env-cleared", ["sh", "-c", script], cgroup, escaper_file)
    escaper = escaper_pid(escaper_file, cleanup)
    assert running(escaper)
    execution.abort()
    assert done.get(timeout=20).left_running == ()
    wait_until(lambda: not running(escaper), timeout_s=5)


def test_what_could_not_be_killed_is_reported_not_claimed_aborted_clean(
    cleanup: list[int], escaper_file: Path
) -> None:
    """The agent without cgroups may not signal every process of its job (another user's,
    a setuid program's): simulated here by a kill that the escaper refuses."""
    job_id = "refused"
    refused: set[int] = set()

    def kill(pid: int, sig: int) -> None:
        if pid in refused:
            raise PermissionError(1, "Operation not permitted")
        os.kill(pid, sig)

    execution, done = run(job_id, [PY, "-c", SETSID], None, escaper_file, kill=kill)
    escaper = escaper_pid(escaper_file, cleanup)
    refused.add(escaper)
    execution.abort()
    outcome = done.get(timeout=20)
    assert outcome.status == "aborted"
    [left] = outcome.left_running
    assert left.startswith(f"pid {escaper} (python") and left.endswith("permission denied")
    assert f"uid {os.getuid()}" in left
    assert left_of(job_id) == {escaper}  # the rest of the job is gone
