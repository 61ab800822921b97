"""Chaos, bounded: jobs of every kind while the server and agents are killed and paused.

A few seeded rounds per seed (``pushjobs/testbed/chaos.py`` says what each round does and which
invariants it checks). ``PUSHJOBS_CHAOS_SEED=N`` replays one schedule; ``bench/chaos.py``
runs the same for as long as you like.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pushjobs.testbed.chaos import Chaos, Narrow
from tests.support import wait_until

# Seed 1 in the suite, seed 2 a drill (bench/drills.py); a seed of the environment's alone.
SEEDS = (
    [int(os.environ["PUSHJOBS_CHAOS_SEED"])]
    if "PUSHJOBS_CHAOS_SEED" in os.environ
    else [1, pytest.param(2, marks=pytest.mark.drill)]
)
ROUNDS = 3  # a bounded run: bench/chaos.py plays the same for as long as you like
EDGE_ROUNDS = 2  # bench/chaos.py --edges 2 runs them for as long as you like


@pytest.mark.chaos
@pytest.mark.e2e
@pytest.mark.parametrize("seed", SEEDS)
def test_jobs_survive_killed_and_paused_processes(tmp_path: Path, seed: int) -> None:
    with Chaos(tmp_path / "fleet", seed=seed, agents=5) as chaos:
        for _ in range(ROUNDS):
            chaos.round()
        chaos.finish()
        report = chaos.report
    assert report.violations == [], f"replay with PUSHJOBS_CHAOS_SEED={seed}"
    assert report.rounds == ROUNDS and sum(report.outcomes.values()) == ROUNDS


@pytest.mark.chaos
@pytest.mark.e2e
def test_jobs_survive_edges_killed_and_paused(tmp_path: Path) -> None:
    # Every round's victim is one of the two edges: no node may be crashed for it.
    narrow = Narrow(victims=("edge-0", "edge-1"))
    with Chaos(tmp_path / "fleet", seed=3, agents=5, narrow=narrow, edges=2) as chaos:
        for _ in range(EDGE_ROUNDS):
            chaos.round()
        chaos.finish()
        report = chaos.report
    assert report.violations == []
    assert sum(n for what, n in report.faults.items() if " edge " in what) == EDGE_ROUNDS


def test_a_leftover_is_described_and_killed(tmp_path: Path) -> None:
    chaos = Chaos(tmp_path / "fleet", seed=1, agents=2)  # prepared, not started
    env = {
        **os.environ,
        "PUSHJOBS_HOME": str(chaos.sandbox.root),
        "PUSHJOBS_JOB_ID": "j1",
        "PUSHJOBS_NODE": "node-2",
        "PUSHJOBS_AGENT_TAG": "a-dead-agents-tag",
    }
    left = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        # Its environment shows in /proc only once its exec is done, a little after Popen.
        wait_until(lambda: chaos.job_pids("j1") == [left.pid])
        rows = {"node-2": {"state": "crashed", "reason": "node restarted"}}
        why = chaos.leftovers("j1", [left.pid], rows, later_s=0.2)
        assert f"pid {left.pid} on node-2: 'sleep 60' state " in why  # S, or R just started
        assert f"parent {os.getpid()}, group {left.pid}, its agent's watchdog gone" in why
        assert "node-2's row crashed 'node restarted'" in why
        assert why.endswith(f"[{left.pid}] still there 0.2 s later (killed)")
        assert left.wait(timeout=10) == -9
    finally:
        left.kill()
        left.wait()
        chaos.close()
