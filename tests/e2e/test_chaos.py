"""Chaos, bounded: jobs of every kind while the server and agents are killed and paused.

A few seeded rounds per seed (``pushjobs/chaos.py`` says what each round does and which
invariants it checks). ``PUSHJOBS_CHAOS_SEED=N`` replays one schedule; ``bench/chaos.py``
runs the same for as long as you like.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pushjobs.chaos import Chaos

SEEDS = [int(os.environ["PUSHJOBS_CHAOS_SEED"])] if "PUSHJOBS_CHAOS_SEED" in os.environ else [1, 2]
ROUNDS = 6


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
