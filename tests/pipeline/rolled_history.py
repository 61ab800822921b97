"""A hand-made history over five days, for rollups: what each day's rollup must hold, and
windows whose report from rollups must equal the one from raw events.

    day 0  nodes a and b come online; job j1 (uptime) runs on both, one fails; three
           unusable rows (a node_state with no node, a job_state with no state, a
           node_online with an empty node)
    day 1  a flaps; c appears at noon; a one-hour silence ends with b announced again
           (a server gap, for gaps over 10 min); job j3 (patch) regular: a nacks, b
           times out; batch job j4 (deploy) halts, b skipped; job j2 (backup) starts at
           23:59 and runs over midnight
    day 2  j2 ends on both nodes; c goes offline
    day 3  no event at all (no partition)
    day 4  job j5 (uptime) on a, c back online: the newest day, never rolled up
"""

from __future__ import annotations

from typing import Any

DAY = 86_400_000
HOUR = 3_600_000
MIN = 60_000
T0 = 1_790_000_000_000 - 1_790_000_000_000 % DAY  # a midnight UTC
GAP_MS = 10 * MIN

_rows: list[dict[str, Any]] = []


def _ev(ts: int, kind: str, **fields: Any) -> None:
    row = dict.fromkeys(
        ("job_id", "node", "state", "prev_state", "command", "exit_status", "duration_ms")
    )
    row.update(offset=len(_rows), ts=ts, kind=kind, server="s1", **fields)
    _rows.append(row)


def _live(ts: int, node: str, online: bool = True) -> None:
    _ev(ts, "node_online" if online else "node_offline", node=node)


def _job(ts: int, job: str, state: str, command: str, prev: str | None = None) -> None:
    _ev(ts, "job_state", job_id=job, state=state, prev_state=prev, command=command)


def _node(
    ts: int, job: str, node: str, prev: str, state: str, command: str, took: int | None = None
) -> None:
    status = {"succeeded": 0, "failed": 1}.get(state)
    _ev(
        ts,
        "node_state",
        job_id=job,
        node=node,
        prev_state=prev,
        state=state,
        command=command,
        exit_status=status,
        duration_ms=took,
    )


def _run(t: int, job: str, command: str, ends: dict[str, tuple[str, int]]) -> None:
    """A whole job from ``t``: created, voting, every node ready, running, its ends."""
    _ev(t, "job_created", job_id=job, command=command, state="new")
    _job(t + 1, job, "voting", command, "new")
    for i, node in enumerate(ends):
        _node(t + 20 + 5 * i, job, node, "new", "ready", command)
    _job(t + 200, job, "running", command, "voting")
    for node, (state, took) in ends.items():
        _node(t + 205, job, node, "ready", "running", command)
        _node(t + 205 + took, job, node, "running", state, command, took)
    last = t + 205 + max(took for _, took in ends.values())
    _job(last, job, "complete", command, "running")


# day 0
_live(T0 + 1 * HOUR, "a")
_live(T0 + 1 * HOUR + 5, "b")
_run(T0 + 2 * HOUR, "j1", "uptime", {"a": ("succeeded", 40), "b": ("failed", 90)})
_ev(T0 + 3 * HOUR, "node_state", job_id="j1", state="succeeded", command="uptime")
_ev(T0 + 3 * HOUR + 1, "job_state", job_id="j1", command="uptime")
_ev(T0 + 3 * HOUR + 2, "node_online", node="")

# day 1
D1 = T0 + DAY
_live(D1 + 5 * HOUR, "a", online=False)
_live(D1 + 6 * HOUR, "a")
_run(D1 + 7 * HOUR, "j0", "uptime", {"a": ("succeeded", 35), "b": ("succeeded", 38)})
_live(D1 + 8 * HOUR, "b")  # the last event before a silence of an hour...
_live(D1 + 9 * HOUR, "b")  # ...ended by b announced again: a server gap
_ev(D1 + 10 * HOUR, "job_created", job_id="j3", command="patch", state="new")
_job(D1 + 10 * HOUR + 1, "j3", "voting", "patch", "new")
_node(D1 + 10 * HOUR + 30, "j3", "a", "new", "nacked", "patch")
_node(D1 + 10 * HOUR + 31, "j3", "b", "new", "ready", "patch")
_job(D1 + 10 * HOUR + 200, "j3", "running", "patch", "voting")
_node(D1 + 10 * HOUR + 205, "j3", "b", "ready", "running", "patch")
_node(D1 + 10 * HOUR + 5 * MIN, "j3", "b", "running", "timed_out", "patch", 5 * MIN - 205)
_job(D1 + 10 * HOUR + 5 * MIN, "j3", "timed_out", "patch", "running")
_live(D1 + 12 * HOUR, "c")
_ev(D1 + 14 * HOUR, "job_created", job_id="j4", command="deploy", state="new")
_job(D1 + 14 * HOUR + 1, "j4", "voting", "deploy", "new")
_node(D1 + 14 * HOUR + 20, "j4", "a", "new", "ready", "deploy")
_node(D1 + 14 * HOUR + 21, "j4", "b", "new", "ready", "deploy")
_job(D1 + 14 * HOUR + 200, "j4", "running", "deploy", "voting")
_node(D1 + 14 * HOUR + 205, "j4", "a", "ready", "running", "deploy")
_node(D1 + 14 * HOUR + 205 + 8000, "j4", "a", "running", "failed", "deploy", 8000)
_node(D1 + 14 * HOUR + 205 + 8001, "j4", "b", "ready", "skipped", "deploy")
_job(D1 + 14 * HOUR + 205 + 8002, "j4", "halted", "deploy", "running")
J2 = D1 + DAY - MIN  # 23:59
_ev(J2, "job_created", job_id="j2", command="backup", state="new")
_job(J2 + 1, "j2", "voting", "backup", "new")
_node(J2 + 25, "j2", "a", "new", "ready", "backup")
_node(J2 + 27, "j2", "b", "new", "ready", "backup")
_job(J2 + 200, "j2", "running", "backup", "voting")
_node(J2 + 205, "j2", "a", "ready", "running", "backup")
_node(J2 + 205, "j2", "b", "ready", "running", "backup")

# day 2: j2 ends after midnight; c goes offline
D2 = T0 + 2 * DAY
_node(D2 + 2 * MIN, "j2", "a", "running", "succeeded", "backup", 2 * MIN + MIN - 205)
_node(D2 + 3 * MIN, "j2", "b", "running", "succeeded", "backup")  # no duration: from running
_job(D2 + 3 * MIN, "j2", "complete", "backup", "running")
_live(D2 + 4 * HOUR, "c", online=False)
_run(D2 + 5 * HOUR, "j6", "uptime", {"a": ("succeeded", 41), "b": ("crashed", 50)})

# day 3: nothing. day 4: the newest
D4 = T0 + 4 * DAY
_live(D4 + 1 * HOUR, "c")
_run(D4 + 2 * HOUR, "j5", "uptime", {"a": ("succeeded", 44), "c": ("succeeded", 47)})

ROWS: list[dict[str, Any]] = list(_rows)
UNUSABLE = 3  # day 0's
ROLLED_DAYS = ["day0", "day1", "day2"]  # closed days with events (day 3 has none)

WINDOWS = {
    "default": (None, None),
    "whole days 1 and 2": (T0 + DAY, T0 + 3 * DAY),
    "partial at both ends": (T0 + DAY + 7 * HOUR + 100, T0 + 4 * DAY + 2 * HOUR + 100),
    "since day 2": (T0 + 2 * DAY, None),
    "until day 3": (None, T0 + 3 * DAY),
    "day 1 only": (T0 + DAY, T0 + 2 * DAY),
    "from the day before": (T0 + DAY - 1, T0 + 3 * DAY + 1),
}
