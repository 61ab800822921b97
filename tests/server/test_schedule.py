"""Schedule definitions and due times: one-shots, cron in UTC and across real DST changes."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pushjobs.errors import ScheduleError
from server.core.schedule import (
    CatchUp,
    Overlap,
    Schedule,
    Trigger,
    fire_job_id,
    next_due,
    parse_at_ms,
    parse_duration_s,
)

BERLIN = ZoneInfo("Europe/Berlin")


def ms(year: int, month: int, day: int, hour: int, minute: int = 0, tz: object = UTC) -> int:
    return round(datetime(year, month, day, hour, minute, tzinfo=tz).timestamp() * 1000)  # type: ignore[arg-type]


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return Schedule.of("s1", {"command": "x"}, Trigger(cron=expr, tz=tz))


def dues(schedule: Schedule, after_ms: int, count: int) -> list[int]:
    out: list[int] = []
    for _ in range(count):
        due = next_due(schedule, after_ms if not out else out[-1])
        assert due is not None
        out.append(due)
    return out


def wall(due_ms: int) -> str:
    return datetime.fromtimestamp(due_ms / 1000, BERLIN).strftime("%m-%d %H:%M%z")


def test_a_one_shot_is_due_once() -> None:
    at = Schedule.of("s1", {"command": "x"}, Trigger(at_ms=5000))
    assert next_due(at, 0) == 5000
    assert next_due(at, 4999) == 5000
    assert next_due(at, 5000) is None


def test_cron_in_utc_is_strictly_after() -> None:
    every15 = cron("*/15 * * * *")
    start = ms(2026, 1, 1, 10, 0)
    assert next_due(every15, start) == ms(2026, 1, 1, 10, 15)
    assert next_due(every15, start - 1) == start
    assert dues(every15, start, 3) == [ms(2026, 1, 1, 10, m) for m in (15, 30, 45)]


def test_seconds_field_makes_a_six_field_cron() -> None:
    every2s = cron("*/2 * * * * *")
    start = ms(2026, 1, 1, 10, 0)
    assert dues(every2s, start, 3) == [start + 2000, start + 4000, start + 6000]
    assert next_due(every2s, start + 1500) == start + 2000  # from inside a second


def test_spring_gap_fixed_time_fires_once_after_the_gap() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
    daily = cron("30 2 * * *", "Europe/Berlin")
    got = dues(daily, ms(2026, 3, 27, 12), 3)
    assert [wall(d) for d in got] == ["03-28 02:30+0100", "03-29 03:00+0200", "03-30 02:30+0200"]


def test_autumn_overlap_fixed_time_fires_once() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    daily = cron("30 2 * * *", "Europe/Berlin")
    got = dues(daily, ms(2026, 10, 24, 12), 3)
    assert [wall(d) for d in got] == ["10-25 02:30+0200", "10-26 02:30+0100", "10-27 02:30+0100"]
    # Asked from inside the repeated hour, after the first 02:30 fired: not again that day.
    first = got[0]
    assert next_due(daily, first + 50 * 60_000) == got[1]


def test_interval_cron_follows_real_time_across_both_changes() -> None:
    every30 = cron("*/30 * * * *", "Europe/Berlin")
    for start in (ms(2026, 3, 29, 0, 0), ms(2026, 10, 24, 23, 0)):  # UTC: around both
        got = dues(every30, start, 8)
        gaps = {b - a for a, b in zip([start, *got], got, strict=False)}
        assert gaps == {30 * 60_000}  # no lost fire, no double fire


@given(st.integers(min_value=ms(2026, 1, 1, 0), max_value=ms(2027, 1, 1, 0)))
def test_next_due_is_after_and_never_skips_one(after: int) -> None:
    daily = cron("30 2 * * *", "Europe/Berlin")
    due = next_due(daily, after)
    assert due is not None and due > after
    assert due - after <= 25 * 3600_000  # at most a day (plus a DST hour) away
    # Nothing due in between: asking from just before gives the same answer.
    assert next_due(daily, due - 1) == due


def test_bad_triggers_are_refused() -> None:
    with pytest.raises(ScheduleError, match="cron"):
        Trigger(cron="61 * * * *")
    with pytest.raises(ScheduleError, match="zone"):
        Trigger(cron="* * * * *", tz="Mars/Olympus")
    with pytest.raises(ScheduleError):
        Trigger()
    with pytest.raises(ScheduleError):
        Trigger(at_ms=1, cron="* * * * *")
    with pytest.raises(ScheduleError, match="id"):
        Schedule.of("Bad Id!", {}, Trigger(at_ms=1))


def test_round_trip() -> None:
    s = Schedule.of(
        "s1",
        {"command": "x", "nodes": ["a"]},
        Trigger(cron="0 * * * *", tz="Europe/Berlin"),
        catch_up=CatchUp.ALL,
        overlap=Overlap.QUEUE,
        paused=True,
        created_ms=7,
        created_by="alice",
    )
    back = Schedule.from_json(s.to_json())
    assert back == s and back.job == s.job
    with pytest.raises(ScheduleError):
        Schedule.from_json({"schedule_id": "s1"})


def test_fire_job_id_is_deterministic_and_distinct() -> None:
    assert fire_job_id("s1", 1000) == fire_job_id("s1", 1000)
    assert fire_job_id("s1", 1000) != fire_job_id("s1", 2000)
    assert fire_job_id("s1", 1000) != fire_job_id("s2", 1000)
    assert fire_job_id("s1", 0x1234).startswith("1234") and len(fire_job_id("s1", 0x1234)) == 12


def test_durations_and_times() -> None:
    assert parse_duration_s("90") == 90
    assert parse_duration_s("1h30m") == 5400
    assert parse_duration_s("2d") == 172800
    for bad in ("", "abc", "0s", "-5m"):
        with pytest.raises(ScheduleError):
            parse_duration_s(bad)
    assert parse_at_ms("2026-03-29T01:00Z") == ms(2026, 3, 29, 1)
    assert parse_at_ms("2026-03-29T03:00", "Europe/Berlin") == ms(2026, 3, 29, 1)
    with pytest.raises(ScheduleError):
        parse_at_ms("tomorrow")
