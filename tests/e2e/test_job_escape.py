"""Issue 27 through real agents: a whitelisted command that daemonises (``setsid``, a double
fork with a cleared environment) leaves nothing running after ``job abort``, after its
run timeout, or after its agent is killed with SIGKILL.

Two nodes: node-1 contains its jobs as this machine allows (a cgroup of their own where
the agent can make one: its cases skip, saying why, where it cannot), node-2 never uses
cgroups (``job_containment = "ancestry"``): it finds the job's processes by ancestry, by
adoption (the agent is a child subreaper) and by the job's marks.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest

from agent import procscan
from pushjobs.testbed.sandbox import Sandbox
from tests.e2e.conftest import WHITELIST, Fleet
from tests.support import wait_until

# Each writes its escaper's pid to $PUSHJOBS_HOME/escaper-$PUSHJOBS_JOB_ID, then waits.
SCRIPTS = {
    # keeps its environment (the agent's tag, the job's id): leaves the group and session
    "daemonize": (
        "setsid sh -c 'echo $$ > \"$1\"; exec sleep 60' escaper"
        ' "$PUSHJOBS_HOME/escaper-$PUSHJOBS_JOB_ID" &\n'
        "exec sleep 60\n"
    ),
    # a double fork whose daemon clears its environment: no mark, and its parent is gone
    "daemonize-bare": (
        "( env -i setsid sh -c 'echo $$ > \"$1\"; exec sleep 60' escaper"
        ' "$PUSHJOBS_HOME/escaper-$PUSHJOBS_JOB_ID" & )\n'
        "exec sleep 60\n"
    ),
}
# Leaves an escaper (setsid, its parent gone at once) and ends on its own, succeeded: the
# ordinary end's cheap check (an adopted child of the agent, a populated cgroup) finds it.
ENDS = (
    "setsid sh -c 'echo $$ > \"$1\"; exec sleep 60' escaper"
    ' "$PUSHJOBS_HOME/escaper-$PUSHJOBS_JOB_ID" &\n'
    "sleep 0.5\n"
)
NODES = {"node-1": "auto", "node-2": "ancestry"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("escape")
    whitelist = dict(WHITELIST)
    for name, text in {**SCRIPTS, "daemonize-and-end": ENDS}.items():
        (root / f"{name}.sh").write_text(text)
        whitelist[name] = f"sh {root / name}.sh"
    sandbox = Sandbox(root / "fleet", nodes=list(NODES), whitelist=whitelist).prepare()
    for node, containment in NODES.items():
        sandbox.write_agent_config(node, job_containment=containment)
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        sandbox.start_agents()
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def cgroup_or_skip(fleet: Fleet, node: str) -> None:
    if NODES[node] == "ancestry":
        return
    log = (fleet.root / "logs" / f"{node}.log").read_text()
    if "each job runs in a cgroup of its own" not in log:
        why = [line for line in log.splitlines() if "not cgroups" in line]
        pytest.skip(f"no cgroup for jobs here: {why[-1] if why else 'see the log'}")


def of_job(job_id: str) -> set[int]:
    """Every live process whose environment names the job: what of it is still running."""
    mark = [f"PUSHJOBS_JOB_ID={job_id}".encode()]
    table = procscan.processes()
    return {p for p, (_, state) in table.items() if state != "Z" and procscan.is_marked(p, mark)}


def running(pid: int) -> bool:
    return procscan.processes().get(pid, (0, "Z"))[1] != "Z"


@contextlib.contextmanager
def escaping(fleet: Fleet, command: str, node: str, **params: object) -> Iterator[tuple[str, int]]:
    """Start ``command`` on ``node``; the job id and its escaper's pid, running. The escaper
    is killed at the end whatever happened: a failing test leaves nothing behind."""
    cgroup_or_skip(fleet, node)
    job = fleet.start(command, [node], **params)
    pidfile = fleet.root / f"escaper-{job['job_id']}"
    pid = 0
    try:
        pid = int(wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 15))
        assert running(pid)
        yield job["job_id"], pid
    finally:
        # Never pid 0 (no escaper read): os.kill(0, ...) is this test's own process group.
        for left in ({pid} | of_job(job["job_id"])) - {0}:
            with contextlib.suppress(OSError):
                os.kill(left, signal.SIGKILL)


@pytest.mark.parametrize("node", sorted(NODES))
@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_a_daemonised_process_does_not_outlive_its_abort(
    fleet: Fleet, command: str, node: str
) -> None:
    with escaping(fleet, command, node) as (job_id, escaper):
        fleet.call("job.abort", {"job_id": job_id})
        assert fleet.wait_job(job_id)["nodes"][node]["state"] == "aborted"
        # The node is aborted as the server sends the abort; its processes go a moment later.
        wait_until(lambda: not running(escaper) and not of_job(job_id), timeout_s=5)
        row = fleet.status(job_id)["nodes"][node]
        assert "left_running" not in row  # everything was killed: nothing to report


@pytest.mark.parametrize("node", sorted(NODES))
@pytest.mark.parametrize("command", sorted(SCRIPTS))
def test_a_daemonised_process_does_not_outlive_its_run_timeout(
    fleet: Fleet, command: str, node: str
) -> None:
    with escaping(fleet, command, node, timeout_s=2.0) as (job_id, escaper):
        assert fleet.wait_job(job_id)["nodes"][node]["state"] == "timed_out"
        wait_until(lambda: not running(escaper) and not of_job(job_id), timeout_s=5)


@pytest.mark.parametrize("node", sorted(NODES))
def test_a_daemon_a_job_leaves_ends_with_the_job(fleet: Fleet, node: str) -> None:
    with escaping(fleet, "daemonize-and-end", node) as (job_id, escaper):
        assert fleet.wait_job(job_id)["nodes"][node]["state"] == "succeeded"
        wait_until(lambda: not running(escaper) and not of_job(job_id), timeout_s=5)


@pytest.mark.parametrize(
    ("command", "node"),
    # A daemon that cleared its environment after a double fork, with its agent gone, is
    # in no tree and bears no mark: only a cgroup still holds it (docs/security.md).
    [("daemonize", "node-1"), ("daemonize", "node-2"), ("daemonize-bare", "node-1")],
)
def test_a_daemonised_process_does_not_outlive_its_agent_killed_with_sigkill(
    fleet: Fleet, command: str, node: str
) -> None:
    with escaping(fleet, command, node) as (job_id, escaper):
        fleet.wait_node_state(job_id, node, "running")
        fleet.sandbox.kill(node, signal.SIGKILL)
        try:
            # The watchdog's work: the escaper is in no process group it was told of.
            wait_until(lambda: not running(escaper) and not of_job(job_id), timeout_s=10)
        finally:
            fleet.sandbox.start_agent(node)
            fleet.wait_online([node])
