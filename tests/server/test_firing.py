"""The timer core with a fake clock: due order, catch-up and overlap, lazy deletion."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pushjobs.clock import FakeClock
from server.core.scheddues import DueHeap
from server.core.schedfiring import Fire, Firing, Skip
from server.core.schedule import CatchUp, Overlap, Schedule, Trigger, fire_job_id

T0 = 1_800_000_000_000  # a whole minute


def every(seconds: int, sid: str = "s1", **policies: object) -> Schedule:
    return Schedule.of(sid, {"command": "x"}, Trigger(cron=f"*/{seconds} * * * * *"), **policies)  # type: ignore[arg-type]


def idle(job_id: str) -> bool:
    return False


def busy(job_id: str) -> bool:
    return True


def test_due_heap_orders_and_forgets_lazily() -> None:
    heap = DueHeap()
    heap.arm("b", 20)
    heap.arm("a", 10)
    heap.arm("c", 30)
    heap.arm("a", 25)  # re-armed: its old entry is stale
    heap.disarm("c")
    assert heap.next_due_ms() == 20
    assert heap.pop_due(24) == [("b", 20)]
    assert heap.pop_due(100) == [("a", 25)]
    assert heap.next_due_ms() is None and len(heap) == 0


def test_due_heap_memory_follows_live_keys() -> None:
    heap = DueHeap()
    for i in range(10_000):
        heap.arm("k", i)  # the same key re-armed: stale entries get rebuilt away
    assert len(heap._heap) < 200 and heap.pop_due(10**9) == [("k", 9999)]


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 1000)), max_size=60))
def test_due_heap_pops_the_latest_arm_of_each_key_in_order(arms: list[tuple[str, int]]) -> None:
    heap = DueHeap()
    latest: dict[str, int] = {}
    for key, due in arms:
        heap.arm(key, due)
        latest[key] = due
    popped = heap.pop_due(1000)
    assert sorted(popped, key=lambda kv: (kv[1], kv[0])) == sorted(
        latest.items(), key=lambda kv: (kv[1], kv[0])
    )
    assert [d for _, d in popped] == sorted(d for _, d in popped)


def test_fires_in_due_order_with_a_fake_clock() -> None:
    clock = FakeClock(wall_ms=T0)
    core = Firing()
    core.put(every(10, "ten"), T0)
    core.put(every(4, "four"), T0)
    fired: list[tuple[str, int]] = []
    for _ in range(20):
        clock.advance(1)
        fired += [(o.schedule_id, o.due_ms - T0) for o in core.tick(clock.wall_ms(), idle)]
    assert fired == [
        ("four", 4000),
        ("four", 8000),
        ("ten", 10000),
        ("four", 12000),
        ("four", 16000),
        ("four", 20000),
        ("ten", 20000),
    ]
    assert core.next_deadline_ms() == T0 + 24000


def test_a_fire_is_named_by_schedule_and_due_time() -> None:
    core = Firing()
    core.put(every(5), T0)
    [fire] = core.tick(T0 + 5000, idle)
    assert fire == Fire("s1", T0 + 5000, fire_job_id("s1", T0 + 5000))
    assert core.consumed_ms("s1") == T0 + 5000 and core.last_job("s1") == fire.job_id


def test_nothing_fires_twice_when_reloaded_from_its_consumed_time() -> None:
    core = Firing()
    core.put(every(5), T0)
    first = core.tick(T0 + 5000, idle)
    again = Firing()
    again.put(every(5), core.consumed_ms("s1"), core.last_job("s1"))
    assert again.tick(T0 + 5000, idle) == []
    assert [o.due_ms for o in again.tick(T0 + 10_000, idle)] == [T0 + 10_000]
    assert first[0].due_ms == T0 + 5000


def missed_run(policy: CatchUp) -> list[Fire | Skip]:
    core = Firing(grace_ms=20_000)
    core.put(every(10, catch_up=policy, overlap=Overlap.ALLOW), T0)
    # Down from T0 to T0 + 65 s: due times 10..40 s are missed, 50 and 60 s within grace.
    return core.tick(T0 + 65_000, idle)


def test_catch_up_skip_drops_every_missed_due_time() -> None:
    out = missed_run(CatchUp.SKIP)
    assert [(type(o).__name__, o.due_ms - T0) for o in out] == [
        ("Skip", 10_000),
        ("Skip", 20_000),
        ("Skip", 30_000),
        ("Skip", 40_000),
        ("Fire", 50_000),
        ("Fire", 60_000),
    ]


def test_catch_up_once_fires_only_the_latest_missed() -> None:
    out = missed_run(CatchUp.ONCE)
    fires = [o.due_ms - T0 for o in out if isinstance(o, Fire)]
    assert fires == [40_000, 50_000, 60_000]
    assert sorted(o.due_ms - T0 for o in out if isinstance(o, Skip)) == [10_000, 20_000, 30_000]


def test_catch_up_all_fires_every_missed_one() -> None:
    out = missed_run(CatchUp.ALL)
    assert [o.due_ms - T0 for o in out if isinstance(o, Fire)] == [
        10_000,
        20_000,
        30_000,
        40_000,
        50_000,
        60_000,
    ]


def test_catch_up_all_is_bounded() -> None:
    core = Firing(grace_ms=0, cap=5)
    core.put(every(1, catch_up=CatchUp.ALL, overlap=Overlap.ALLOW), T0)
    day_ms = 86_400_000
    out = core.tick(T0 + day_ms, idle)  # 86,400 missed due times
    fires = [o.due_ms - T0 for o in out if isinstance(o, Fire)]
    assert fires[:5] == [1000, 2000, 3000, 4000, 5000] and len(fires) <= 6
    assert core.consumed_ms("s1") >= T0 + day_ms - 1
    assert core.next_deadline_ms() == T0 + day_ms + 1000


def test_overlap_skip_while_the_previous_run_is_active() -> None:
    core = Firing()
    core.put(every(5, overlap=Overlap.SKIP), T0)
    [first] = core.tick(T0 + 5000, idle)
    assert core.tick(T0 + 10_000, busy) == [Skip("s1", T0 + 10_000, "overlap")]
    assert core.consumed_ms("s1") == T0 + 10_000
    [third] = core.tick(T0 + 15_000, idle)
    assert isinstance(first, Fire) and isinstance(third, Fire)


def test_overlap_allow_fires_anyway() -> None:
    core = Firing()
    core.put(every(5, overlap=Overlap.ALLOW), T0)
    core.tick(T0 + 5000, idle)
    assert [type(o) for o in core.tick(T0 + 10_000, busy)] == [Fire]


def test_overlap_queue_holds_due_times_until_the_run_ends() -> None:
    running = {"yes": True}
    core = Firing()
    core.put(every(5, overlap=Overlap.QUEUE), T0)
    [first] = core.tick(T0 + 5000, idle)
    assert core.tick(T0 + 10_000, lambda j: running["yes"] and j == first.job_id) == []
    assert core.tick(T0 + 15_000, lambda j: running["yes"]) == []
    assert core.consumed_ms("s1") == T0 + 5000  # held: not settled, found due again on restart
    assert core.next_due_ms("s1") == T0 + 10_000
    running["yes"] = False
    [second] = core.tick(T0 + 15_500, idle)
    assert second.due_ms == T0 + 10_000
    # The one just fired is active: the next held one waits for it.
    assert core.tick(T0 + 15_600, lambda j: j == second.job_id) == []
    [third] = core.tick(T0 + 15_700, idle)
    assert third.due_ms == T0 + 15_000


def test_catch_up_all_with_queue_fires_each_missed_one_in_turn() -> None:
    core = Firing(grace_ms=1000)
    core.put(every(2, catch_up=CatchUp.ALL, overlap=Overlap.QUEUE), T0)
    active: set[str] = set()
    fired = core.tick(T0 + 7000, lambda j: j in active)
    assert [o.due_ms - T0 for o in fired] == [2000]  # 4 and 6 s held behind it
    active.add(fired[0].job_id)
    assert core.tick(T0 + 7100, lambda j: j in active) == []
    active.clear()
    assert [o.due_ms - T0 for o in core.tick(T0 + 7200, lambda j: j in active)] == [4000]


def test_pause_disarms_and_resume_rearms_from_now() -> None:
    core = Firing()
    s = every(5)
    core.put(s, T0)
    core.put(s.with_paused(True), T0)
    assert core.tick(T0 + 60_000, idle) == [] and core.next_deadline_ms() is None
    core.put(s, T0 + 60_000)  # resumed: what fell due while paused is not fired
    assert [o.due_ms for o in core.tick(T0 + 65_000, idle)] == [T0 + 65_000]


def test_delete_removes_it() -> None:
    core = Firing()
    core.put(every(5), T0)
    core.remove("s1")
    assert core.tick(T0 + 60_000, idle) == [] and len(core) == 0


def test_a_one_shot_fires_once_then_is_done() -> None:
    core = Firing()
    core.put(Schedule.of("once", {"command": "x"}, Trigger(at_ms=T0 + 3000)), T0)
    assert [o.due_ms for o in core.tick(T0 + 3000, idle)] == [T0 + 3000]
    assert core.tick(T0 + 99_000, idle) == [] and core.next_due_ms("once") is None


def test_a_fire_made_in_this_tick_counts_as_running_for_the_overlap_policy() -> None:
    core = Firing(grace_ms=1000)
    core.put(every(10, catch_up=CatchUp.ALL), T0)  # overlap skip: the default
    out = core.tick(T0 + 35_000, idle)
    assert [(type(o).__name__, o.due_ms - T0) for o in out] == [
        ("Fire", 10_000),
        ("Skip", 20_000),
        ("Skip", 30_000),
    ]
    assert core.consumed_ms("s1") == T0 + 30_000
