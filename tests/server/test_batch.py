"""The batch window's arithmetic (server/core/batch.py), on a fake clock: pure, no job, no I/O."""

from __future__ import annotations

import pytest

from pushjobs.quorum import Share
from pushjobs.states import NodeState
from server.core.batch import NODE_RESTARTED, BatchSpec, Window, next_start_ms, plan

T0 = 1_700_000_000_000


def spec(size: str, wait_ms: int = 0, max_failures: str | None = None) -> BatchSpec:
    failures = None if max_failures is None else Share.parse(max_failures, "max_failures")
    return BatchSpec(Share.parse(size, "batch"), wait_ms, failures)


# --- sizes and budgets ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "targets", "window"),
    [("3", 10, 3), ("30", 10, 30), ("30%", 10, 3), ("25%", 10, 2), ("1%", 10, 1), ("100%", 7, 7)],
)
def test_window_is_a_count_or_a_percent_rounded_down_never_zero(text, targets, window):
    assert spec(text).window(targets) == window


@pytest.mark.parametrize(
    ("text", "targets", "budget"), [("2", 10, 2), ("10%", 15, 2), ("20%", 10, 2), ("1%", 3, 1)]
)
def test_failure_budget_is_a_count_or_a_percent_rounded_up(text, targets, budget):
    assert spec("1", max_failures=text).budget(targets) == budget


def test_no_budget_without_max_failures():
    assert spec("3").budget(10) is None


@pytest.mark.parametrize("text", ["", "0", "-2", "0%", "101%", "abc", "2.5", "nan%"])
def test_bad_share_is_refused_with_its_name(text):
    with pytest.raises(ValueError, match="batch must be a count"):
        Share.parse(text, "batch")


def test_options_round_trip():
    s = spec("30%", 1500, "2")
    assert s.to_options() == {"size": "30%", "wait_s": 1.5, "max_failures": "2"}
    assert BatchSpec.from_options({"batch": s.to_options()}) == s
    assert BatchSpec.from_options({"env": {}}) is None


# --- plan: which nodes start now -------------------------------------------------------------


def run(s, *, targets=10, in_flight=0, waiting=10, failures=0, last=None, now=T0):
    return plan(
        s,
        targets=targets,
        in_flight=in_flight,
        waiting=waiting,
        failures=failures,
        last_start_ms=last,
        now_ms=now,
    )


def test_first_window_starts_at_once_even_with_a_wait():
    assert run(spec("3", wait_ms=5000)).start == 3
    assert run(spec("3"), waiting=2).start == 2  # fewer ready than the window


def test_a_full_window_starts_nothing():
    assert run(spec("3"), in_flight=3, waiting=7, last=T0).start == 0


def test_without_a_wait_every_free_slot_fills_at_once():
    assert run(spec("3"), in_flight=1, waiting=7, last=T0).start == 2


def test_with_a_wait_one_start_per_wait_after_the_previous_start():
    s = spec("3", wait_ms=1000)
    assert run(s, in_flight=0, waiting=7, last=T0, now=T0 + 999).start == 0
    assert run(s, in_flight=0, waiting=7, last=T0, now=T0 + 1000).start == 1


def test_a_spent_budget_halts_and_starts_nothing():
    s = spec("3", max_failures="2")
    assert run(s, in_flight=1, waiting=5, failures=1, last=T0).halt is False
    halted = run(s, in_flight=1, waiting=5, failures=2, last=T0)
    assert halted.halt is True and halted.start == 0
    assert run(s, in_flight=1, waiting=0, failures=2, last=T0).halt is False  # nothing to skip


def test_next_start_is_due_after_the_wait_only_while_a_slot_is_free_and_a_node_waits():
    s = spec("2", wait_ms=1000)
    kw = {"targets": 5, "last_start_ms": T0}
    assert next_start_ms(s, in_flight=1, waiting=3, **kw) == T0 + 1000
    assert next_start_ms(s, in_flight=2, waiting=3, **kw) is None  # full: on a finish
    assert next_start_ms(s, in_flight=1, waiting=0, **kw) is None
    assert next_start_ms(s, targets=5, in_flight=0, waiting=3, last_start_ms=None) == 0


def simulate(s, targets, durations_ms, *, fail=frozenset(), tick_ms=100, until_ms=120_000):
    """Drive ``plan`` on a fake clock: (start, end) ms per node, skipped nodes, peak in flight."""
    waiting = list(range(targets))
    running: dict[int, int] = {}  # node -> end ms
    done: dict[int, tuple[int, int]] = {}
    failures, last, peak, skipped = 0, None, 0, []
    for now in range(0, until_ms, tick_ms):
        for node, end in sorted(running.items()):
            if end <= now:
                del running[node]
                done[node] = (done[node][0], end)
                failures += node in fail
        step = run(
            s,
            targets=targets,
            in_flight=len(running),
            waiting=len(waiting),
            failures=failures,
            last=last,
            now=now,
        )
        if step.halt:
            skipped, waiting = waiting, []
        for _ in range(step.start):
            node = waiting.pop(0)
            running[node] = now + durations_ms[node]
            done[node] = (now, -1)
            last = now
        peak = max(peak, len(running))
        if not waiting and not running:
            break
    return done, skipped, peak


def test_sliding_window_of_three_over_ten_nodes_never_exceeds_three_and_runs_each_once():
    durations = [1000, 3000, 500, 700, 2000, 400, 400, 400, 400, 400]
    done, skipped, peak = simulate(spec("3"), 10, durations)
    assert peak == 3 and skipped == [] and sorted(done) == list(range(10))
    # Sliding, not lockstep: node 3 starts when node 2 ends (500 ms), before node 0 (1000).
    assert done[3][0] == 500
    assert done[4][0] == 1000


def test_batch_wait_spaces_every_start_after_the_first_window():
    done, _, peak = simulate(spec("2", wait_ms=1000), 5, [100] * 5)
    starts = sorted(start for start, _ in done.values())
    assert starts == [0, 0, 1000, 2000, 3000]
    assert peak == 2


def test_failure_budget_skips_the_rest_and_lets_running_nodes_finish():
    durations = [1000, 2000, 300, 300, 300, 300]
    done, skipped, _ = simulate(spec("2", max_failures="1"), 6, durations, fail={0})
    # Node 0 fails at 1000 ms; node 1 (running since 0) still finishes at 2000 ms.
    assert done[1] == (0, 2000)
    assert set(done) | set(skipped) == set(range(6)) and not set(done) & set(skipped)
    assert skipped and all(start <= 1000 for start, _ in done.values())


# --- Window: the bookkeeping rebuilt from a node table ----------------------------------------


def test_rebuilt_window_keeps_target_order_and_in_flight_deadlines():
    w = Window(spec("2"))
    rows = [
        ("a", NodeState.SUCCEEDED, T0, ""),
        ("b", NodeState.RUNNING, T0 + 10, ""),
        ("c", NodeState.WAITING, None, ""),
        ("d", NodeState.READY, T0 + 20, ""),
        ("e", NodeState.WAITING, None, ""),
        ("f", NodeState.CRASHED, T0 + 1, "node went offline"),  # may run on: held
        ("g", NodeState.CRASHED, T0 + 2, NODE_RESTARTED),  # its agent killed it: free
    ]
    w.rebuild(rows, 5000)
    assert list(w.waiting) == ["c", "e"]
    assert list(w.deadlines) == [(T0 + 5010, "b"), (T0 + 5020, "d")]
    assert w.lost == {"f": T0 + 5001}
    assert w.last_start_ms == T0 + 20
    states = {name: state for name, state, _, _ in rows}
    states["c"] = NodeState.CRASHED  # left the queue while waiting
    assert w.next_waiting(states.__getitem__) == "e"
    states["b"] = NodeState.SUCCEEDED
    assert w.first_deadline_ms(states.__getitem__) == T0 + 5020
    assert w.expired(T0 + 5019, states.__getitem__) == []
    assert w.expired(T0 + 5020, states.__getitem__) == ["d"]
