"""A hand-made history over five days, for rollups: what each day's rollup must hold, and
windows whose report from rollups must equal the one from raw events.

    day 0  nodes a and b come online; job j1 (uptime) runs on both, one fails; three
           unusable rows (a node_state with no node, a job_state with no state, a
           node_online with an empty node)
    day 1  a flaps; c appears at noon; a one-hour silence ends with b announced again
           (a server gap, for gaps over 10 min); job j3 (patch) regular: a nacks, b
           times out; job j8 (patch, --offline-wait) regular: c, never heard at its
           start, is asked when it appears; batch job j4 (deploy) halts, b skipped; job
           j9 (patch, --offline-wait 8h) waits for d and e: d appears just before
           midnight, is asked then and votes after it; job j2 (backup) starts at 23:59
           and runs over midnight
    day 2  j2 ends on both nodes; e is unavailable at j9's deadline; c goes offline; a
           flaps while job j10 (patch, --offline-wait 2h) waits for it and for c: a is
           asked when back, c unavailable at the deadline (j10 is regular)
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
# j8 waits for c, never heard yet: asked as c appears, its vote 25 ms after
J8 = D1 + 11 * HOUR
_ev(J8, "job_created", job_id="j8", command="patch", state="new")
_job(J8 + 1, "j8", "voting", "patch", "new")
_node(J8 + 1, "j8", "c", "new", "offline", "patch")
_node(J8 + 20, "j8", "a", "new", "ready", "patch")
_node(J8 + 21, "j8", "b", "new", "ready", "patch")
_job(J8 + 200, "j8", "running", "patch", "voting")
_node(J8 + 205, "j8", "a", "ready", "running", "patch")
_node(J8 + 205, "j8", "b", "ready", "running", "patch")
_node(J8 + 235, "j8", "a", "running", "succeeded", "patch", 30)
_node(J8 + 238, "j8", "b", "running", "succeeded", "patch", 33)
_live(D1 + 12 * HOUR, "c")
_node(D1 + 12 * HOUR + 2, "j8", "c", "offline", "new", "patch")
_node(D1 + 12 * HOUR + 27, "j8", "c", "new", "ready", "patch")
_node(D1 + 12 * HOUR + 30, "j8", "c", "ready", "running", "patch")
_node(D1 + 12 * HOUR + 72, "j8", "c", "running", "succeeded", "patch", 42)
_job(D1 + 12 * HOUR + 72, "j8", "complete", "patch", "running")
_ev(D1 + 14 * HOUR, "job_created", job_id="j4", command="deploy", state="new")
_job(D1 + 14 * HOUR + 1, "j4", "voting", "deploy", "new")
_node(D1 + 14 * HOUR + 20, "j4", "a", "new", "ready", "deploy")
_node(D1 + 14 * HOUR + 21, "j4", "b", "new", "ready", "deploy")
_job(D1 + 14 * HOUR + 200, "j4", "running", "deploy", "voting")
_node(D1 + 14 * HOUR + 205, "j4", "a", "ready", "running", "deploy")
_node(D1 + 14 * HOUR + 205 + 8000, "j4", "a", "running", "failed", "deploy", 8000)
_node(D1 + 14 * HOUR + 205 + 8001, "j4", "b", "ready", "skipped", "deploy")
_job(D1 + 14 * HOUR + 205 + 8002, "j4", "halted", "deploy", "running")
# j9 waits 8 h for d and e (both never heard); a runs at once
J9 = D1 + 20 * HOUR
_ev(J9, "job_created", job_id="j9", command="patch", state="new")
_job(J9 + 1, "j9", "voting", "patch", "new")
_node(J9 + 1, "j9", "d", "new", "offline", "patch")
_node(J9 + 1, "j9", "e", "new", "offline", "patch")
_node(J9 + 22, "j9", "a", "new", "ready", "patch")
_job(J9 + 200, "j9", "running", "patch", "voting")
_node(J9 + 205, "j9", "a", "ready", "running", "patch")
_node(J9 + 236, "j9", "a", "running", "succeeded", "patch", 31)
J2 = D1 + DAY - MIN  # 23:59
_ev(J2, "job_created", job_id="j2", command="backup", state="new")
_job(J2 + 1, "j2", "voting", "backup", "new")
_node(J2 + 25, "j2", "a", "new", "ready", "backup")
_node(J2 + 27, "j2", "b", "new", "ready", "backup")
_job(J2 + 200, "j2", "running", "backup", "voting")
_node(J2 + 205, "j2", "a", "ready", "running", "backup")
_node(J2 + 205, "j2", "b", "ready", "running", "backup")
_live(T0 + 2 * DAY - 10, "d")  # d appears 10 ms before midnight: asked for j9 then
_node(T0 + 2 * DAY - 8, "j9", "d", "offline", "new", "patch")

# day 2: j2 ends after midnight; c goes offline
D2 = T0 + 2 * DAY
_node(D2 + 2 * MIN, "j2", "a", "running", "succeeded", "backup", 2 * MIN + MIN - 205)
_node(D2 + 3 * MIN, "j2", "b", "running", "succeeded", "backup")  # no duration: from running
_job(D2 + 3 * MIN, "j2", "complete", "backup", "running")
_node(D2 + 20, "j9", "d", "new", "ready", "patch")  # 28 ms after it was asked
_node(D2 + 25, "j9", "d", "ready", "running", "patch")
_node(D2 + 70, "j9", "d", "running", "succeeded", "patch", 45)
_live(D2 + 4 * HOUR, "c", online=False)
_node(J9 + 1 + 8 * HOUR, "j9", "e", "offline", "unavailable", "patch")  # the deadline
_job(J9 + 1 + 8 * HOUR, "j9", "complete", "patch", "running")
_run(D2 + 5 * HOUR, "j6", "uptime", {"a": ("succeeded", 41), "b": ("crashed", 50)})
# j10 waits 2 h for a (away for an hour) and c (offline since 04:00)
_live(D2 + 8 * HOUR, "a", online=False)
J10 = D2 + 8 * HOUR + 30 * MIN
_ev(J10, "job_created", job_id="j10", command="patch", state="new")
_job(J10 + 1, "j10", "voting", "patch", "new")
_node(J10 + 1, "j10", "a", "new", "offline", "patch")
_node(J10 + 1, "j10", "c", "new", "offline", "patch")
_node(J10 + 24, "j10", "b", "new", "ready", "patch")
_job(J10 + 200, "j10", "running", "patch", "voting")
_node(J10 + 205, "j10", "b", "ready", "running", "patch")
_node(J10 + 239, "j10", "b", "running", "succeeded", "patch", 34)
_live(D2 + 9 * HOUR, "a")
_node(D2 + 9 * HOUR + 2, "j10", "a", "offline", "new", "patch")
_node(D2 + 9 * HOUR + 29, "j10", "a", "new", "ready", "patch")  # 27 ms after it was asked
_node(D2 + 9 * HOUR + 33, "j10", "a", "ready", "running", "patch")
_node(D2 + 9 * HOUR + 93, "j10", "a", "running", "failed", "patch", 60)
_node(J10 + 1 + 2 * HOUR, "j10", "c", "offline", "unavailable", "patch")
_job(J10 + 1 + 2 * HOUR, "j10", "complete", "patch", "running")

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
