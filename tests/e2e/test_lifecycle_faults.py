"""A job's life under paused and killed processes: no vote lost, no node held after its job.

Real server and agents on 127.0.0.1. A paused agent (SIGSTOP) is how a node misses a
moment of a job's life without dying: its commands wait in its socket and it acts on them
late, when it is continued.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from tests.e2e.conftest import Fleet, online_fleet
from tests.support import wait_until


@contextlib.contextmanager
def paused(fleet: Fleet, name: str) -> Iterator[int]:
    pid = fleet.sandbox.procs[name].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have been killed meanwhile
            os.kill(pid, signal.SIGCONT)


def committed_on(fleet: Fleet, node: str, job_id: str) -> bool:
    """Whether ``node`` committed to ``job_id``: its journal says so (read, not asked)."""
    path = fleet.root / "state" / node / "journal.db"
    if not path.exists():
        return False
    with contextlib.closing(sqlite3.connect(path, timeout=1.0)) as db:
        row = db.execute("SELECT 1 FROM seen WHERE job_id = ?", (job_id,)).fetchone()
    return row is not None


def test_a_vote_lost_with_a_killed_server_is_asked_again_and_the_job_completes(
    tmp_path: Path,
) -> None:
    # A liveness window long enough that no pause below makes anyone look offline, and a
    # lease long enough that the restarted server sees every node back before it leads
    # (as with the default 5 s session: the nodes' reappearance asks them nothing).
    with online_fleet(
        tmp_path,
        interval_s=0.5,
        offline_threshold=20,
        server_extra={"server": {"leader_session_s": 6.0}},
    ) as fleet:
        vote_lost_with_the_server(fleet)


def vote_lost_with_the_server(fleet: Fleet) -> None:
    # Command sockets connect on first use, and a paused node cannot finish a CurveZMQ
    # handshake: one job first, so node-3's commit reaches it while it is paused.
    warm = fleet.start("true")
    assert fleet.wait_job(warm["job_id"])["state"] == "complete"
    with paused(fleet, "node-3") as node_3:
        job = fleet.start("count-slowly", vote_timeout_s=30)
        for name in ("node-1", "node-2"):
            fleet.wait_node_state(job["job_id"], name, "ready")
        with paused(fleet, "server"):
            # node-3 acts on its commit and acks into the paused server's socket buffer,
            # where the kill below loses it: node-3 holds the job, the log says "new".
            os.kill(node_3, signal.SIGCONT)
            wait_until(lambda: committed_on(fleet, "node-3", job["job_id"]), timeout_s=10)
            fleet.sandbox.kill("server", signal.SIGKILL)
    fleet.reconnect()
    fleet.sandbox.start_server()
    done = fleet.wait_job(job["job_id"], timeout_s=25)
    assert done["state"] == "complete", done
    assert done["summary"] == {"succeeded": 3}
    for name in fleet.sandbox.nodes:
        assert (fleet.root / f"count-{name}").read_text() == "x\n"  # each ran once


def test_a_node_that_acts_on_a_commit_after_its_job_ended_is_released_at_once(
    fleet: Fleet,
) -> None:
    with paused(fleet, "node-3") as pid:
        job = fleet.start("true", quorum="2", vote_timeout_s=30)
        fleet.wait_node_state(job["job_id"], "node-3", "crashed")  # silent past the window
        done = fleet.wait_job(job["job_id"])
        assert done["state"] == "complete"
        os.kill(pid, signal.SIGCONT)  # it acts on the commit it was sent before it paused
        fleet.wait_online(["node-3"])
    # Its commit timeout is a minute; the server tells it to let go at its next heartbeat.
    wait_until(lambda: fleet.node("node-3")["job_id"] is None, timeout_s=10)
    again = fleet.start("true", ["node-3"])
    assert fleet.wait_job(again["job_id"])["summary"] == {"succeeded": 1}


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_job_does_not_outlive_its_agent_killed_with_sigkill(fleet: Fleet) -> None:
    job = fleet.start("sleeper", ["node-1"])
    fleet.wait_node_state(job["job_id"], "node-1", "running")
    pidfile = fleet.root / "pid-node-1"
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout_s=10)
    pid = int(pidfile.read_text())  # the job's sleep: sh exec'd it, so it leads the group
    assert running(pid)
    fleet.sandbox.kill("node-1", signal.SIGKILL)
    try:
        wait_until(lambda: not running(pid), timeout_s=5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # without the fix, do not leave it behind
    fleet.wait_node_state(job["job_id"], "node-1", "crashed")
    fleet.sandbox.start_agent("node-1")
    fleet.wait_online(["node-1"])
    again = fleet.start("true", ["node-1"])
    assert fleet.wait_job(again["job_id"])["summary"] == {"succeeded": 1}


def test_a_key_rejected_then_accepted_brings_its_node_back_within_seconds(fleet: Fleet) -> None:
    fleet.call("key.reject", {"names": ["node-1"]})
    fleet.wait_offline("node-1")
    fleet.call("key.accept", {"names": ["node-1"]})
    # Its heartbeats under the revoked session are answered with "rediscover"; before, it
    # stayed offline until its config lifetime (an hour) ran out.
    fleet.wait_online(["node-1"], timeout_s=15)
    job = fleet.start("true", ["node-1"])
    assert fleet.wait_job(job["job_id"])["summary"] == {"succeeded": 1}
    log = (fleet.root / "logs" / "node-1.log").read_text()
    assert "rediscovering: the server no longer accepts this node's session" in log


def test_a_second_agent_with_a_nodes_key_is_refused_and_reported_not_swapped_in(
    fleet: Fleet,
) -> None:
    first = fleet.node("node-1")
    fleet.sandbox.start_agent("node-1", process="node-1-again")
    log = fleet.root / "logs" / "node-1-again.log"
    wait_until(lambda: "is refused until that one goes silent" in log.read_text(), timeout_s=15)
    row = fleet.node("node-1")
    assert row["online"] and row["command_endpoint"] == first["command_endpoint"]
    assert row["incarnation"] == first["incarnation"]
    assert row["duplicate"] is not None
    assert row["duplicate"]["endpoint"] != first["command_endpoint"]
    server_log = (fleet.root / "logs" / "server.log").read_text()
    assert "node node-1: a second agent" in server_log
    assert first["command_endpoint"] in server_log
    fleet.sandbox.kill("node-1-again", signal.SIGTERM)
    job = fleet.start("true", ["node-1"])  # the first agent kept the node all along
    assert fleet.wait_job(job["job_id"])["summary"] == {"succeeded": 1}


def test_a_key_rejected_mid_run_stops_the_command_it_calls_crashed(fleet: Fleet) -> None:
    job = fleet.start("sleeper", ["node-2"])
    fleet.wait_node_state(job["job_id"], "node-2", "running")
    pidfile = fleet.root / "pid-node-2"
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout_s=10)
    pid = int(pidfile.read_text())
    try:
        fleet.call("key.reject", {"names": ["node-2"]})
        fleet.wait_node_state(job["job_id"], "node-2", "crashed")
        wait_until(lambda: not running(pid), timeout_s=5)  # was: ran on to its end
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    assert fleet.status(job["job_id"])["nodes"]["node-2"]["reason"] == "key revoked"


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def test_a_job_left_by_an_agent_that_died_with_its_watchdog_is_killed_on_restart(
    fleet: Fleet,
) -> None:
    job = fleet.start("sleeper", ["node-1"])
    fleet.wait_node_state(job["job_id"], "node-1", "running")
    pidfile = fleet.root / "pid-node-1"
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout_s=10)
    pid = int(pidfile.read_text())
    agent = fleet.sandbox.procs["node-1"].pid
    before = fleet.node("node-1")["incarnation"]
    [watchdog] = [c for c in children(agent) if b"-S" in Path(f"/proc/{c}/cmdline").read_bytes()]
    try:
        os.kill(watchdog, signal.SIGKILL)  # both die at once: nothing kills the job now
        wait_until(lambda: not running(watchdog), timeout_s=5)
        fleet.sandbox.kill("node-1", signal.SIGKILL)
        assert running(pid)
        fleet.sandbox.start_agent("node-1")  # it finds the job in its journal first
        wait_until(lambda: not running(pid), timeout_s=5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    log = (fleet.root / "logs" / "node-1.log").read_text()
    assert "still running from before this agent started; killed" in log
    # The new agent (a new command port) is admitted once the dead one has gone silent.
    wait_until(
        lambda: (row := fleet.node("node-1"))["online"] and row["incarnation"] != before,
        timeout_s=20,
    )
    again = fleet.start("true", ["node-1"])
    assert fleet.wait_job(again["job_id"])["summary"] == {"succeeded": 1}
