"""Chaos for rolling batches and schedules, bounded: the nodes' own count of a window, and
two rounds on a real fleet (``pushjobs/testbed/chaos.py`` says what each checks).
``bench/chaos.py --kinds batch,scheduled`` runs them for longer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pushjobs.testbed.chaos import Chaos, Narrow, peak_in_flight, window_of

S = 1_000_000_000  # nanoseconds


def test_the_window_is_counted_from_start_and_end_stamps() -> None:
    stamps = [("a", "start", 0), ("b", "start", 1 * S), ("a", "end", 2 * S), ("c", "start", 2 * S)]
    stamps += [("b", "end", 3 * S), ("c", "end", 4 * S)]
    assert peak_in_flight(stamps, {}, 9 * S) == 2  # c starts as a ends: not three at once
    late = [*stamps, ("d", "start", 3 * S - 1)]  # before b ends, and never ended
    assert peak_in_flight(late, {}, 9 * S) == 3


def test_a_run_cut_by_its_agents_kill_ends_then() -> None:
    stamps = [("a", "start", 0), ("b", "start", 2 * S), ("b", "end", 3 * S)]
    assert peak_in_flight(stamps, {"a": 1 * S}, 9 * S) == 1  # a's agent killed at 1 s
    assert peak_in_flight(stamps, {}, 9 * S) == 2  # else a still ran when b started
    # Forked as its agent died, it stamps its start after the kill: it ends as it began.
    assert peak_in_flight([*stamps, ("c", "start", 2 * S)], {"a": S, "c": S}, 9 * S) == 1


def test_the_window_of_a_spec() -> None:
    assert [window_of(spec, 8) for spec in ("2", "3", "25%", "10%")] == [2, 3, 2, 1]


@pytest.mark.chaos
@pytest.mark.e2e
@pytest.mark.parametrize(
    ("kind", "point"), [("batch", "between"), ("scheduled", "fire")], ids=["batch", "scheduled"]
)
def test_a_server_killed_mid_batch_or_at_a_fire(tmp_path: Path, kind: str, point: str) -> None:
    narrow = Narrow(kinds=(kind,), points=(point,), faults=("kill",), victims=("server",))
    with Chaos(tmp_path / "fleet", seed=1, agents=4, narrow=narrow) as chaos:
        chaos.round()
        chaos.finish()  # a schedule's jobs are counted again there
        report = chaos.report
    assert report.violations == []
    assert report.faults == {f"kill server at {point}": 1}
    assert report.outcomes == {"complete": 1}
    if kind == "scheduled":
        assert [len(jobs) for jobs in report.fired.values()] == [1]
