"""Halting a rollout on a health signal, end to end: a real server whose ``[halt]`` lists
one check and names a real Prometheus (``prometheus.py``), real agents, the CLI.

``sicken`` stamps the node (as ``stamp``) and then makes the service "unhealthy" (a file
the listed check tests for): the check passes before the first batch and fails after it.
The alert fires when the test sets the metric Prometheus scrapes.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import prometheus
from tests.e2e.conftest import WHITELIST, Fleet, make_fleet, run_cli
from tests.support import wait_until

NODES = ["node-1", "node-2", "node-3", "node-4"]
ALERT = "DeployErrors"
SICKEN = (
    'sh -c \'echo $PUSHJOBS_JOB_ID >> "$PUSHJOBS_HOME/stamps-$PUSHJOBS_NODE"; '
    'touch "$PUSHJOBS_HOME/unhealthy"\''
)

pytestmark = pytest.mark.skipif(
    not prometheus.available(), reason="no prometheus binary (.ci/run installs Debian's)"
)


def stamps(fleet: Fleet, node: str) -> list[str]:
    path = fleet.root / f"stamps-{node}"
    return path.read_text().split() if path.exists() else []


def check_of(root: Path) -> str:
    return f"test ! -e {root / 'fleet' / 'unhealthy'}"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[prometheus.Prometheus]:
    with prometheus.Prometheus(tmp_path_factory.mktemp("prometheus"), ALERT, "app_errors > 0") as p:
        yield p


@pytest.fixture(scope="module")
def halting(
    tmp_path_factory: pytest.TempPathFactory, prom: prometheus.Prometheus
) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("halt")
    halt = {"checks": [check_of(root)], "prometheus_url": prom.url}
    fleet = make_fleet(
        root, nodes=NODES, whitelist={**WHITELIST, "sicken": SICKEN}, server_extra={"halt": halt}
    )
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def test_a_check_that_fails_after_the_first_batch_halts_the_rollout(halting: Fleet) -> None:
    fleet = halting
    check = check_of(fleet.root.parent)
    code, out, err = run_cli(
        fleet.sandbox.client_config_path,
        "job",
        "start",
        "sicken",
        *NODES,
        "--batch",
        "1",
        "--halt-if",
        check,
    )
    assert code == 1, (code, out, err)  # halted: part of it did not run
    assert f"halted: halt-if check '{check}': failed (exit 1)" in out, out
    assert [len(stamps(fleet, n)) for n in NODES] == [1, 0, 0, 0]  # node-1 once, no other
    job_id = stamps(fleet, "node-1")[0]
    job = fleet.status(job_id)
    assert job["state"] == "halted" and job["summary"] == {"skipped": 3, "succeeded": 1}
    assert job["nodes"]["node-2"]["reason"] == f"not started: {job['halt_reason']}"
    (fleet.root / "unhealthy").unlink()


def test_a_firing_prometheus_alert_halts_the_rollout_between_batches(
    halting: Fleet, prom: prometheus.Prometheus
) -> None:
    fleet = halting
    job = fleet.start(
        "stamp",
        NODES,
        batch=1,
        batch_wait_s=60,  # the next batch would start a minute later: the alert comes first
        halt_if_alert=ALERT,
        halt_check_every_s=1,
    )
    job_id = job["job_id"]
    fleet.wait_node_state(job_id, "node-1", "succeeded")
    assert fleet.status(job_id)["state"] == "running"
    prom.set_metric("app_errors", 3)
    try:
        done = fleet.wait_job(job_id, timeout_s=30)
        assert prom.firing()
    finally:
        prom.set_metric("app_errors", 0)
    assert done["state"] == "halted", done
    assert done["halt_reason"].startswith(f"halt-if Prometheus alert '{ALERT}': firing (1 alert)")
    assert "severity=page" in done["halt_reason"]
    assert [stamps(fleet, n).count(job_id) for n in NODES] == [1, 0, 0, 0]
    wait_until(lambda: not prom.firing(), 30, 0.2)


def test_a_check_the_server_does_not_list_is_refused_before_anything_starts(
    halting: Fleet,
) -> None:
    config = halting.sandbox.client_config_path
    before = halting.call("job.list", {})["jobs"]
    code, out, err = run_cli(
        config, "job", "start", "stamp", *NODES, "--batch", "1", "--halt-if", "rm -rf /"
    )
    assert code == 2 and "does not run the check 'rm -rf /'" in err, (code, out, err)
    code, out, err = run_cli(config, "job", "start", "stamp", *NODES, "--halt-if-alert", ALERT)
    assert code == 2 and "need --batch" in err, (code, out, err)
    assert halting.call("job.list", {})["jobs"] == before


# ~15 s: bench/drills.py (the suite keeps the restore's unit tests, test_halt_if.py in
# tests/server, and the checks above on a real fleet).
@pytest.mark.drill
def test_a_leader_killed_then_paused_mid_rollout_asks_a_fresh_check_and_runs_each_once(
    halting: Fleet,
) -> None:
    fleet = halting
    check = check_of(fleet.root.parent)
    job_id = fleet.start(
        "stamp", NODES, batch=1, batch_wait_s=4, halt_if=check, halt_check_every_s=1
    )["job_id"]
    fleet.wait_node_state(job_id, "node-1", "succeeded")
    fleet.sandbox.kill("server", signal.SIGKILL)  # between batches, a check maybe running
    fleet.sandbox.start_server()
    fleet.reconnect()
    wait_until(
        lambda: (
            (fleet.status_or_none(job_id) or {}).get("nodes", {}).get("node-2", {}).get("state")
            == "succeeded"
        ),
        40,
        0.1,
    )
    server = fleet.sandbox.procs["server"].popen
    server.send_signal(signal.SIGSTOP)
    time.sleep(2)  # the pause is the fault (noqa: not a wait)
    server.send_signal(signal.SIGCONT)
    (fleet.root / "unhealthy").touch()
    try:
        done = fleet.wait_job(job_id, timeout_s=30)
    finally:
        (fleet.root / "unhealthy").unlink()
    assert done["state"] == "halted", done
    assert [stamps(fleet, n).count(job_id) for n in NODES] == [1, 1, 0, 0]
