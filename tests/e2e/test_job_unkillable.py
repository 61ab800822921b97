"""An unprivileged agent that cannot kill a process of its job says so (issue 27, item 7).

The agent runs as ``nobody`` (``setpriv``), with no cgroup of its own (``job_containment =
"ancestry"``): it finds its job's processes by ancestry and marks, and kills what it may.
The job starts a process that becomes another user: a setuid-root copy of the system's
Python that takes root as its real uid too (``setresuid(0, 0, 0)``) and waits. ``nobody``
can signal none of its processes then, so at ``job abort`` that one survives; the node's
row must name it (``left_running``) rather than claim a clean ``aborted``.

Making the agent unprivileged and the helper setuid takes root: elsewhere the test skips,
saying so. The helper lives in a directory of its own under /tmp (the pytest directories
are not open to ``nobody``), removed at the end with the survivor killed by its pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import site
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import agent
from agent import procscan
from pushjobs.testbed.sandbox import Sandbox
from tests.e2e.conftest import WHITELIST, Fleet
from tests.support import wait_until

NOBODY = 65534
SETPRIV = shutil.which("setpriv")
PYTHON = "/usr/bin/python3.11"
NODE = "node-1"

# The survivor: root for good (real, effective and saved uid), its pid written, waiting.
BECOME_ROOT = (
    "import os, sys, time; os.setresuid(0, 0, 0); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"  # the job (noqa: not a wait)
)


class NobodySandbox(Sandbox):
    """A sandbox whose agents run as ``nobody``."""

    def _agent_argv(self, name: str) -> list[str]:
        assert SETPRIV is not None
        drop = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        # This venv's interpreter may live where nobody cannot reach (a pyenv under /root):
        # the system's Python of the same version, given this venv's packages, runs it.
        packages = ":".join([str(Path(agent.__file__).parents[1]), *site.getsitepackages()])
        _, *args = super()._agent_argv(name)
        return [*drop, "env", f"PYTHONPATH={packages}", PYTHON, *args]


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to run the agent as nobody and to make a setuid helper"
    if SETPRIV is None:
        return "no setpriv to run the agent as nobody"
    if not os.path.exists(PYTHON):
        return f"no {PYTHON} to copy as the setuid helper"
    return None


@pytest.fixture
def fleet() -> Iterator[tuple[Fleet, Path]]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="pushjobs-unkillable-", dir="/tmp"))
    try:
        root.chmod(0o755)
        helper = root / "become-root"
        shutil.copy(PYTHON, helper)
        helper.chmod(stat.S_ISUID | 0o755)  # owned by root: runs with euid 0
        (root / "stuck.sh").write_text(
            f'{helper} -c "{BECOME_ROOT}" "$PUSHJOBS_HOME/stuck-$PUSHJOBS_JOB_ID" &\n'
            "exec sleep 60\n"
        )
        whitelist = {**WHITELIST, "stuck": f"sh {root / 'stuck.sh'}"}
        sandbox = NobodySandbox(root / "fleet", nodes=[NODE], whitelist=whitelist).prepare()
        sandbox.write_agent_config(NODE, job_containment="ancestry")
        for path in [sandbox.root, *sandbox.root.rglob("*")]:
            os.chown(path, NOBODY, NOBODY)  # the agent's keys, state and logs are its own
        fleet = Fleet(sandbox)
        try:
            sandbox.start_server()
            sandbox.start_agents()
            fleet.wait_online()
            yield fleet, root
        finally:
            fleet.close()
    finally:
        for pidfile in root.glob("fleet/stuck-*"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def running(pid: int) -> bool:
    return procscan.processes().get(pid, (0, "Z"))[1] != "Z"


def test_what_the_agent_could_not_kill_is_in_the_nodes_row(fleet: tuple[Fleet, Path]) -> None:
    pushjobs, root = fleet
    agent = pushjobs.sandbox.procs[NODE].pid
    assert os.stat(f"/proc/{agent}").st_uid == NOBODY  # the agent is truly unprivileged
    job = pushjobs.start("stuck", [NODE])["job_id"]
    pidfile = root / "fleet" / f"stuck-{job}"
    pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 20))
    assert os.stat(f"/proc/{pid}").st_uid == 0  # another user's now
    pushjobs.wait_node_state(job, NODE, "running")
    pushjobs.call("job.abort", {"job_id": job})

    def reported() -> dict[str, object] | None:
        row = pushjobs.status(job)["nodes"][NODE]
        return row if row.get("left_running") else None

    row = wait_until(reported, 30, 0.05)
    left = row["left_running"]
    assert isinstance(left, list) and any(str(pid) in entry for entry in left), left
    assert "uid 0" in str(left) and "permission denied" in str(left)
    assert running(pid)  # it did survive: the row tells the truth
