"""The executor on real processes: output, exit status, timeout, abort, process groups."""

from __future__ import annotations

import os
import queue
import sys

import pytest

from agent.executor import Execution
from pushjobs.errors import ExecutionError
from tests.support import wait_until


def run(argv, timeout_s=20.0, **kwargs):
    done: queue.Queue = queue.Queue()
    execution = Execution("j1", argv, timeout_s=timeout_s, on_done=done.put, **kwargs)
    return execution, done


def outcome(done, timeout_s=20.0):
    return done.get(timeout=timeout_s)


def pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); check its state
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].startswith("Z")
    except FileNotFoundError:
        return True


PY = sys.executable


def test_success_with_output():
    _, done = run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    result = outcome(done)
    assert (result.status, result.exit_status, result.reason) == ("succeeded", 0, "")
    assert (result.stdout, result.stderr) == ("out\n", "err\n")
    assert not result.stdout_truncated


def test_failure_keeps_exit_status_and_output():
    _, done = run([PY, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])
    result = outcome(done)
    assert (result.status, result.exit_status, result.reason) == ("failed", 3, "exit status 3")
    assert result.stderr == "boom\n"


def test_capture_keeps_the_tail_and_flags_truncation():
    _, done = run([PY, "-c", "print('x' * 5000 + 'END')"], capture_bytes=100)
    result = outcome(done)
    assert result.stdout.endswith("END\n") and len(result.stdout) == 100
    assert result.stdout_truncated


def test_env_and_cwd(tmp_path):
    env = {"PATH": os.environ["PATH"], "PUSHJOBS_JOB_ID": "j1", "X": "y"}
    script = "import os; print(os.environ['PUSHJOBS_JOB_ID'], os.environ['X'], os.getcwd())"
    _, done = run([PY, "-c", script], env=env, cwd=str(tmp_path))
    assert outcome(done).stdout.split() == ["j1", "y", str(tmp_path)]


# Children that live until a signal ends them: what the group kill must reach.
GRANDCHILD = (
    "import signal, subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'])\n"
    "print(child.pid, flush=True)\n"
    "signal.pause()\n"
)


def test_timeout_kills_the_whole_group():
    execution, done = run([PY, "-c", GRANDCHILD], timeout_s=1.0)
    result = outcome(done)
    assert result.status == "timed_out" and result.reason == "run timeout of 1 s"
    grandchild = int(result.stdout.split()[0])
    wait_until(lambda: pid_gone(grandchild) and pid_gone(execution.pid), timeout_s=5)


def test_abort_kills_the_whole_group():
    execution, done = run([PY, "-c", GRANDCHILD])
    wait_until(lambda: os.path.exists(f"/proc/{execution.pid}"), timeout_s=5)
    execution.abort()
    result = outcome(done)
    assert result.status == "aborted" and result.reason == "abort requested"
    assert result.exit_status is not None and result.exit_status < 0
    wait_until(lambda: pid_gone(execution.pid), timeout_s=5)


def test_background_child_holding_the_pipe_does_not_hang_the_job():
    script = (
        "import subprocess, sys\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import signal; signal.pause()'])\n"
        "print(c.pid, flush=True)\n"
    )
    _, done = run([PY, "-c", script])
    result = outcome(done, timeout_s=10)
    assert result.status == "succeeded"
    wait_until(lambda: pid_gone(int(result.stdout.split()[0])), timeout_s=5)


def test_killed_by_signal_is_a_failure():
    _, done = run([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"])
    result = outcome(done)
    assert result.status == "failed" and result.reason == "killed by signal SIGTERM"


@pytest.mark.parametrize(
    ("argv", "kwargs"),
    [(["/nonexistent/binary"], {}), ([PY, "-c", "pass"], {"cwd": "/nonexistent/dir"})],
)
def test_cannot_start(argv, kwargs):
    with pytest.raises(ExecutionError, match="cannot start"):
        run(argv, **kwargs)
