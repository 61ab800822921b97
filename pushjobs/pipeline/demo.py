"""Realistic synthetic event histories, for ``pushjobs report --demo`` and the benchmark.

A fleet of ``nodes`` over ``days``: most nodes stay up and flap rarely, a few flap often;
jobs of a few commands run on random subsets all day; votes take tens of milliseconds,
runs take what their command takes, a few nodes are stragglers (several times slower),
and failures, timeouts, crashes and nacks happen at rates that differ by command. A few
jobs wait for their offline targets (``job start --offline-wait``): most come back
within the wait and are asked then (late: their vote and run hours after the others'),
the rest are unavailable at the deadline. The records are what the server writes, with
log offsets in emission order.

Which jobs wait, and for whom, is drawn from a generator of its own: every other draw is
the one the history made before there were such jobs, so its figures stay comparable.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pushjobs.pipeline import events

DAY_MS = 86_400_000
OFFLINE_WAIT = 0.03  # of jobs: started with --offline-wait
WAIT_MS = 8 * 3_600_000  # their wait
AWAY = 0.2  # of a waiting job's targets: offline at its start
BACK = 0.8  # of those: back within the wait


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    run_ms: float  # median run time
    fail: float
    timeout: float
    nack: float


COMMANDS = (
    Command("uptime", 40, 0.002, 0.0, 0.005),
    Command("chef-client", 25_000, 0.03, 0.002, 0.01),
    Command("deploy-web", 8_000, 0.05, 0.002, 0.02),
    Command("backup", 60_000, 0.01, 0.004, 0.0),
)


def history(
    *,
    nodes: int = 40,
    days: float = 7.0,
    jobs_per_day: int = 300,
    targets: tuple[int, int] = (5, 30),
    start_ms: int = 1_790_000_000_000,
    seed: int = 1,
) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    waits = random.Random(f"{seed}:offline-wait")
    names = [f"web-{i:04d}" for i in range(nodes)]
    flappy = set(rng.sample(names, max(1, nodes // 20)))
    slow = set(rng.sample(names, max(2, nodes // 20)))
    end_ms = start_ms + int(days * DAY_MS)
    offset = 0

    def emit(kind: str, ts: int, **fields: Any) -> dict[str, Any]:
        nonlocal offset
        row = dict.fromkeys(
            ("job_id", "node", "state", "prev_state", "command", "exit_status", "duration_ms")
        )
        row.update(offset=offset, ts=ts, kind=kind, server="server-1", **fields)
        offset += 1
        return row

    for name in names:  # liveness first: everyone comes online at the start
        yield emit("node_online", start_ms + rng.randrange(60_000), node=name, state="online")
        ts = start_ms
        rate = 8.0 if name in flappy else 0.15  # outages per day
        while True:
            ts += int(rng.expovariate(rate / DAY_MS))
            if ts >= end_ms:
                break
            yield emit("node_offline", ts, node=name, state="offline")
            ts += int(rng.expovariate(1 / (20 * 60_000 if name in flappy else 5 * 60_000)))
            yield emit("node_online", ts, node=name, state="online")

    def on_node(
        ts: int, node: str, prev: str, state: str, *, job: str, command: str, **more: Any
    ) -> dict[str, Any]:
        fields = {"job_id": job, "node": node, "command": command, **more}
        return emit("node_state", ts, state=state, prev_state=prev, **fields)

    count = int(days * jobs_per_day)
    for j in range(count):
        t0 = start_ms + int((j + rng.random()) * (end_ms - start_ms) / count)
        cmd = rng.choice(COMMANDS)
        job = f"{t0:x}{j:06x}"
        chosen = rng.sample(names, min(nodes, rng.randint(*targets)))
        yield emit("job_created", t0, job_id=job, command=cmd.name, state="new")
        yield emit(
            "job_state", t0 + 1, job_id=job, command=cmd.name, state="voting", prev_state="new"
        )
        # Offline at the start of a job that waits: back that long after, or never (None).
        away: dict[str, int | None] = {}
        if waits.random() < OFFLINE_WAIT:
            for node in chosen:
                if waits.random() < AWAY:
                    away[node] = waits.randrange(WAIT_MS) if waits.random() < BACK else None
        votes = {}
        for node in chosen:
            delay = int(rng.lognormvariate(3.2, 0.5))  # ~25 ms
            votes[node] = (delay, "nacked" if rng.random() < cmd.nack else "ready")
        ready = [n for n, (_, vote) in votes.items() if vote == "ready"]
        runs = {}  # every ack's run is drawn, whether the job then runs it or not
        for node in ready:
            factor = 4.0 if node in slow else 1.0
            took = int(cmd.run_ms * factor * rng.lognormvariate(0, 0.35))
            draw = rng.random()
            if draw < cmd.timeout:
                state, status, took = "timed_out", None, int(cmd.run_ms * 10)
            elif draw < cmd.timeout + cmd.fail:
                state, status = "failed", 1
            elif draw < cmd.timeout + cmd.fail + 0.001:
                state, status = "crashed", None
            else:
                state, status = "succeeded", 0
            runs[node] = (state, status, took)
        node_event = functools.partial(on_node, job=job, command=cmd.name)
        for node, (delay, vote) in votes.items():
            if node in away:
                yield node_event(t0 + 1, node, "new", "offline")
            else:
                yield node_event(t0 + 1 + delay, node, "new", vote)
        run0 = t0 + 200
        on_time = [n for n in votes if n not in away]
        if on_time and not any(n in runs for n in on_time):
            # Quorum failed: nobody is waited for any more.
            for node in away:
                yield node_event(run0, node, "offline", "unavailable")
            yield emit(
                "job_state",
                run0,
                job_id=job,
                command=cmd.name,
                state="quorum_failed",
                prev_state="voting",
            )
            continue
        yield emit(
            "job_state", run0, job_id=job, command=cmd.name, state="running", prev_state="voting"
        )
        last = run0
        for node in on_time:
            if node not in runs:
                continue
            state, status, took = runs[node]
            yield node_event(run0 + 5, node, "ready", "running")
            yield node_event(
                run0 + took, node, "running", state, exit_status=status, duration_ms=took
            )
            last = max(last, run0 + took)
        deadline = t0 + 1 + WAIT_MS
        for node, back in away.items():
            if back is None:  # still offline at the deadline
                yield node_event(deadline, node, "offline", "unavailable")
                last = max(last, deadline)
                continue
            asked = t0 + 1 + back  # it came online: asked now, it votes alone
            delay, vote = votes[node]
            yield node_event(asked, node, "offline", "new")
            yield node_event(asked + delay, node, "new", vote)
            last = max(last, asked + delay)
            if node in runs:  # told to run on its ack, timed from then
                state, status, took = runs[node]
                yield node_event(asked + delay + 5, node, "ready", "running")
                end = asked + delay + 5 + took
                yield node_event(end, node, "running", state, exit_status=status, duration_ms=took)
                last = max(last, end)
        yield emit(
            "job_state", last, job_id=job, command=cmd.name, state="complete", prev_state="running"
        )


def write_parquet(rows: Iterator[dict[str, Any]], out: Path, chunk: int = 500_000) -> int:
    """Write rows in the archive's layout (``date=.../events-<first>-<last>.parquet``)."""
    from pushjobs.pipeline.archive import write_events

    total = 0
    buffer: list[dict[str, Any]] = []

    def flush() -> None:
        by_day: dict[str, list[dict[str, Any]]] = {}
        for row in buffer:
            by_day.setdefault(events.day(row["ts"]), []).append(row)
        for day, day_rows in by_day.items():
            folder = out / f"date={day}"
            folder.mkdir(parents=True, exist_ok=True)
            name = f"events-{day_rows[0]['offset']:020d}-{day_rows[-1]['offset']:020d}.parquet"
            write_events(day_rows, folder / name)
        buffer.clear()

    for row in rows:
        buffer.append(row)
        total += 1
        if len(buffer) >= chunk:
            flush()
    if buffer:
        flush()
    return total
