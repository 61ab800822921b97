"""Schedules at scale, in one process: the timer core and the leader's scheduler.

    python bench/schedules.py [--schedules 100000] [--resume 10000] [--seconds 20]

1. memory: ``--schedules`` cron schedules armed in the core (``server/core/schedfiring.py``): RSS
   growth and bytes per schedule, and the time to arm them;
2. resume: a server gaining a partition of ``--resume`` schedules after a rebalance
   (``Scheduler.rebalance``): its lease taken, the partition read back from a SQLite log
   and its schedules re-armed; and (in a fresh process) a lone new leader reading every
   schedule (``take_over``) and arming them all, with its RSS growth;
3. lateness: 1,000 fires a minute (1,000 schedules, each at its own second of the
   minute) among all the others, fired by the scheduler through real job effects on the
   SQLite log for ``--seconds``, the loop sleeping until the next deadline as the daemon
   does; lateness is due time to job start, p50/p99/max.

Goals (issue 17): p99 lateness under one heartbeat interval (1 s by default), resume under
2 s, RSS growth under 200 MB for 100,000 schedules.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import orjson
from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.clock import SystemClock
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.liveness import LivenessTracker
from server.core.nodetable import NodeTable
from server.core.schedfiring import Firing
from server.core.schedshards import topic_of
from server.core.schedule import Schedule, Trigger
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.schedcatalog import Entry
from server.shell.schedlog import fire_key, fire_value, key_of
from server.shell.scheduler import Scheduler
from server.shell.serverconfig import JobSettings

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def job(command: str, node: str) -> dict[str, Any]:
    options: dict[str, Any] = {"env": {}, "cwd": None, "capture": False}
    return {"command": command, "nodes": [node], "quorum": "0", "options": options}


def daily(i: int) -> Schedule:
    """A schedule that does not fire during the bench: daily, at a minute of the night."""
    trigger = Trigger(cron=f"{i % 60} {2 + i % 3} * * *", tz=ZONES[i % len(ZONES)])
    return Schedule.of(f"d{i:07d}", job("backup", f"db-{i % 500:03d}"), trigger)


def each_minute(i: int) -> Schedule:
    """One of 1,000 that fire once a minute each, at second ``i % 60``."""
    return Schedule.of(f"m{i:07d}", job("ping", "n1"), Trigger(cron=f"{i % 60} * * * * *"))


class NoSender:
    secrets = None

    def send(self, *args: Any) -> None:
        pass


def leader(path: Path) -> tuple[Jobs, Scheduler]:
    clock = SystemClock()
    log = open_log(LogSettings(backend="sqlite", path=path), clock=clock)
    topics = create_standard_topics(log)
    leadership = Leadership.join(log, topics, "pushjobs.", f"bench-{time.time_ns()}", 30.0)
    leadership.renew(clock.monotonic())
    liveness = LivenessTracker(1.0, 3, 1)
    jobs = Jobs(
        JobSettings(),
        leadership,
        topics=topics,
        sender=NoSender(),  # type: ignore[arg-type]
        nodes=NodeTable(liveness),
        liveness=liveness,
        server_name="bench",
        registered=lambda node: True,
    )
    scheduler = Scheduler(jobs, topics.schedules, clock=clock, settle_ms=0)
    return jobs, scheduler


def close(jobs: Jobs, scheduler: Scheduler) -> None:
    scheduler.close()
    jobs.leadership.close()


def bench_memory(count: int) -> None:
    """The core alone: what arming ``count`` schedules costs, and the heap's speed."""
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    core = Firing()
    now_ms = SystemClock().wall_ms()
    for i in range(count):
        core.put(daily(i), now_ms)
    took = time.perf_counter() - started
    gc.collect()
    grown = rss_mb() - before
    print(
        f"core: {count} schedules armed in {took:.2f} s ({count / took:,.0f}/s); "
        f"RSS +{grown:.0f} MB, {grown * 2**20 / max(1, count):,.0f} bytes per schedule"
    )
    started = time.perf_counter()
    popped = core.heap.pop_due(now_ms + 86_400_000)
    print(f"heap: {len(popped)} due times popped in {time.perf_counter() - started:.2f} s")


def write_schedules(path: Path, count: int, *, topic: str | None = None) -> None:
    """``count`` schedules, each with a fire state, in their partitions (all in ``topic``
    when given, as for one partition's resume)."""
    jobs, writer = leader(path)
    now_ms = SystemClock().wall_ms()
    batches: dict[str, list[tuple[str, bytes | None]]] = {}
    for i in range(count):
        schedule = daily(i)
        sid = schedule.schedule_id
        where = topic or topic_of(writer.topic, sid, writer.count)
        batch = batches.setdefault(where, [])
        definition = {"schedule": schedule.to_json(), "from_ms": now_ms - 86_400_000}
        batch.append((key_of(sid), orjson.dumps(definition)))
        job_id = f"{i:x}00000000"
        fired: list[dict[str, Any]] = [
            {"due_ms": now_ms - 3_600_000, "job_id": job_id, "outcome": "fired"}
        ]
        batch.append((fire_key(sid), fire_value(now_ms - 60_000, job_id, fired, [])))
        if len(batch) >= 2000:
            jobs.leadership.append(where, batch)
            batch.clear()
    for where, batch in batches.items():
        jobs.leadership.append(where, batch)
    close(jobs, writer)


def measure_load(path: Path) -> None:
    """In a fresh process: RSS growth of a lone new leader reading every schedule of
    ``path`` (its catalog) and arming them (it owns every partition)."""
    gc.collect()
    before = rss_mb()
    jobs, scheduler = leader(path)
    clock = SystemClock()
    started = time.perf_counter()
    scheduler.take_over(clock.wall_ms())
    scheduler.rebalance(clock.wall_ms())
    took = time.perf_counter() - started
    gc.collect()
    grown = rss_mb() - before
    count = len(scheduler.owner)
    print(
        f"server: {count} schedules loaded from the log and armed in {took:.2f} s; "
        f"RSS +{grown:.0f} MB, {grown * 2**20 / max(1, count):,.0f} bytes per schedule"
    )
    close(jobs, scheduler)


def bench_resume(count: int, root: Path) -> None:
    """A partition of ``count`` schedules gained by a server after a rebalance: its lease
    taken, the partition read back and its schedules armed."""
    path = root / "resume.db"
    write_schedules(path, count, topic="pushjobs.schedules.0")
    jobs, new_owner = leader(path)
    started = time.perf_counter()
    new_owner.rebalance(SystemClock().wall_ms())
    took = time.perf_counter() - started
    print(
        f"resume: a partition of {len(new_owner.owner)} schedules taken and armed in {took:.2f} s"
    )
    close(jobs, new_owner)


def bench_lateness(count: int, seconds: float, root: Path) -> None:
    jobs, scheduler = leader(root / "lateness.db")
    clock = SystemClock()
    scheduler.take_over(clock.wall_ms())
    scheduler.rebalance(clock.wall_ms())  # alone: every partition is this server's
    owner, catalog = scheduler.owner, scheduler.catalog

    def arm(schedule: Schedule, now_ms: int) -> None:
        sid = schedule.schedule_id
        topic = topic_of(scheduler.topic, sid, scheduler.count)
        owner.firing.put(schedule, now_ms)
        owner.topic_of[sid] = topic
        catalog.put(sid, Entry(schedule, now_ms, topic))

    now_ms = clock.wall_ms()
    for i in range(count):
        arm(daily(i), now_ms)
    now_ms = clock.wall_ms()  # arming the others took a while: from now on
    for i in range(1000):
        arm(each_minute(i), now_ms)
    late: deque[int] = deque()
    start = jobs.start

    def timed_start(*args: Any, **kwargs: Any) -> str:
        job_id: str = start(*args, **kwargs)
        late.append(time.time_ns() // 1_000_000 - int(job_id[:-8], 16))
        return job_id

    jobs.start = timed_start  # type: ignore[method-assign]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        due = scheduler.next_deadline_ms()
        wait_s = 0.25 if due is None else min(0.25, max(0.0, (due - clock.wall_ms()) / 1000))
        time.sleep(wait_s)  # the daemon's poll, with nothing to read
        scheduler.tick(clock.wall_ms())
        jobs.flush(clock.wall_ms())
    close(jobs, scheduler)
    ordered = sorted(late)
    if not ordered:
        print("lateness: no fires")
        return
    p50, p99 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)]
    rate = len(ordered) / seconds * 60
    print(
        f"lateness: {len(ordered)} fires in {seconds:g} s ({rate:,.0f}/min) among "
        f"{count + 1000} schedules: p50 {p50} ms, p99 {p99} ms, max {ordered[-1]} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--resume", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--load", type=Path, help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.load is not None:
        measure_load(args.load)
        return
    print(describe())
    bench_memory(args.schedules)
    with tempfile.TemporaryDirectory() as tmp:
        write_schedules(Path(tmp) / "all.db", args.schedules)
        subprocess.run([sys.executable, __file__, "--load", str(Path(tmp) / "all.db")], check=True)
        bench_resume(args.resume, Path(tmp))
        bench_lateness(args.schedules, args.seconds, Path(tmp))


if __name__ == "__main__":
    main()
