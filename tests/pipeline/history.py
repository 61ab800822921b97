"""A small event history whose report was worked out by hand (the arithmetic is below).

Window [10_000, 110_000) ms. Nodes a, b, c, d; jobs J0 (before the window), J1, J2
(command ``uptime``) and J3 (``deploy``).
"""

from __future__ import annotations

from typing import Any

SINCE, UNTIL = 10_000, 110_000


def _ev(kind: str, ts: int, **fields: Any) -> dict[str, Any]:
    row = dict.fromkeys(
        ("job_id", "node", "state", "prev_state", "command", "exit_status", "duration_ms")
    )
    row.update(kind=kind, ts=ts, server="s1", **fields)
    return row


def _live(node: str, ts: int, online: bool) -> dict[str, Any]:
    kind = "node_online" if online else "node_offline"
    return _ev(kind, ts, node=node, state=kind[5:])


def _job(job: str, ts: int, state: str, command: str) -> dict[str, Any]:
    return _ev("job_state", ts, job_id=job, state=state, command=command)


def _node(job: str, node: str, ts: int, prev: str, state: str, command: str) -> dict[str, Any]:
    fields = {"job_id": job, "node": node, "prev_state": prev, "state": state}
    return _ev("node_state", ts, command=command, **fields)


U, D = "uptime", "deploy"
EVENTS: list[dict[str, Any]] = [
    # a: online before the window, offline 40k-50k.
    #   online [10k,40k)=30k + [50k,110k)=60k = 90k; offline 10k -> 90 %, 1 flap, longest 10k
    _live("a", 0, True),
    _live("a", 40_000, False),
    _live("a", 50_000, True),
    # b: online [10k,20k)+[30k,60k)+[90k,110k) = 60k; offline [20k,30k)+[60k,90k) = 40k
    #   -> 60 %, 2 flaps, longest 30k
    _live("b", 5_000, True),
    _live("b", 20_000, False),
    _live("b", 30_000, True),
    _live("b", 60_000, False),
    _live("b", 90_000, True),
    # c: unknown until 70k, then online 40k -> 100 %, 0 flaps, longest 0
    _live("c", 70_000, True),
    # d: offline since before the window: offline 100k -> 0 %; its flap is before the window
    _live("d", 5_000, False),
    # J0 is before the window: none of it counts
    _job("J0", 1_000, "voting", U),
    _node("J0", "a", 1_100, "new", "ready", U),
    # J1 (uptime): votes a 100, b 300; runs a 1000 (succeeded), b 3000 (failed)
    _job("J1", 20_000, "voting", U),
    _node("J1", "c", 20_000, "new", "unavailable", U),
    _node("J1", "a", 20_100, "new", "ready", U),
    _node("J1", "b", 20_300, "new", "ready", U),
    _job("J1", 20_500, "running", U),
    _node("J1", "a", 20_600, "ready", "running", U),
    _node("J1", "b", 20_700, "ready", "running", U),
    _node("J1", "a", 21_500, "running", "succeeded", U),
    _node("J1", "b", 23_500, "running", "failed", U),
    # J2 (uptime): votes c 100, a 200, b 400 (nacked); runs a 500 (succeeded straight from
    # ready), c 10000 (timed_out)
    _job("J2", 80_000, "voting", U),
    _node("J2", "c", 80_100, "new", "ready", U),
    _node("J2", "a", 80_200, "new", "ready", U),
    _node("J2", "b", 80_400, "new", "nacked", U),
    _job("J2", 80_500, "running", U),
    _node("J2", "c", 80_600, "ready", "running", U),
    _node("J2", "a", 81_000, "ready", "succeeded", U),
    _node("J2", "c", 90_500, "running", "timed_out", U),
    # J3 (deploy): votes a 50, c 150; runs c 500 (succeeded), a 1000 (crashed)
    _job("J3", 95_000, "voting", D),
    _node("J3", "a", 95_050, "new", "ready", D),
    _node("J3", "c", 95_150, "new", "ready", D),
    _job("J3", 95_200, "running", D),
    _node("J3", "c", 95_250, "ready", "running", D),
    _node("J3", "a", 95_300, "ready", "running", D),
    _node("J3", "c", 95_700, "running", "succeeded", D),
    _node("J3", "a", 96_200, "running", "crashed", D),
]
for i, row in enumerate(EVENTS):
    row["offset"] = i

# Rows a report must count and skip.
MALFORMED: list[dict[str, Any]] = [
    {**_ev("node_state", 30_000, job_id="J9", state="ready"), "offset": 100},  # no node
    {**_ev("bogus", 30_000, node="a"), "offset": 101},  # unknown kind
    {**_ev("node_online", 0, node="a"), "ts": None, "offset": 102},  # no time
]

AVAILABILITY = [
    {"node": "a", "online_ms": 90_000, "offline_ms": 10_000, "availability_pct": 90.0,
     "flaps": 1, "longest_outage_ms": 10_000},
    {"node": "b", "online_ms": 60_000, "offline_ms": 40_000, "availability_pct": 60.0,
     "flaps": 2, "longest_outage_ms": 30_000},
    {"node": "c", "online_ms": 40_000, "offline_ms": 0, "availability_pct": 100.0,
     "flaps": 0, "longest_outage_ms": 0},
    {"node": "d", "online_ms": 0, "offline_ms": 100_000, "availability_pct": 0.0,
     "flaps": 0, "longest_outage_ms": 100_000},
]  # fmt: skip

_Z = {"succeeded": 0, "failed": 0, "timed_out": 0, "crashed": 0, "nacked": 0}
OUTCOMES = [
    {"command": "deploy", "node": "a", "jobs": 1, **_Z, "crashed": 1},
    {"command": "deploy", "node": "c", "jobs": 1, **_Z, "succeeded": 1},
    {"command": "uptime", "node": "a", "jobs": 2, **_Z, "succeeded": 2},
    {"command": "uptime", "node": "b", "jobs": 2, **_Z, "failed": 1, "nacked": 1},
    {"command": "uptime", "node": "c", "jobs": 2, **_Z, "timed_out": 1},
]
BY_COMMAND = [
    {"command": "deploy", "jobs": 1, "nodes": 2, **_Z, "succeeded": 1, "crashed": 1},
    {"command": "uptime", "jobs": 2, "nodes": 3, **_Z, "succeeded": 2, "failed": 1,
     "timed_out": 1, "nacked": 1},
]  # fmt: skip


def _lat(metric: str, scope: str, count: int, p50: float, p95: float, p99: float) -> dict[str, Any]:
    return {"metric": metric, "scope": scope, "count": count, "p50": p50, "p95": p95, "p99": p99}


# Percentiles interpolate at q * (n - 1) in sorted order.
#   commit_to_ack  fleet [50,100,100,150,200,300,400]: p50 = 150 (pos 3),
#     p95 = 300 + 0.7 * 100 = 370 (pos 5.7), p99 = 300 + 0.94 * 100 = 394 (pos 5.94)
#   a [50,100,200]: p50 100, p95 100 + 0.9 * 100 = 190, p99 100 + 0.98 * 100 = 198
#   b [300,400]: 350, 395, 399      c [100,150]: 125, 147.5, 149.5
#   run_to_finish  fleet [500,500,1000,1000,3000,10000] (6 runs): p50 1000 (pos 2.5),
#     p95 3000 + 0.75 * 7000 = 8250 (pos 4.75), p99 3000 + 0.95 * 7000 = 9650 (pos 4.95)
#   a [500,1000,1000]: 1000, 1000, 1000    b [3000]: 3000 x3
#   c [500,10000]: p50 5250, p95 500 + 0.95 * 9500 = 9525, p99 500 + 0.99 * 9500 = 9905
LATENCY = [
    _lat("commit_to_ack", "(fleet)", 7, 150.0, 370.0, 394.0),
    _lat("commit_to_ack", "a", 3, 100.0, 190.0, 198.0),
    _lat("commit_to_ack", "b", 2, 350.0, 395.0, 399.0),
    _lat("commit_to_ack", "c", 2, 125.0, 147.5, 149.5),
    _lat("run_to_finish", "(fleet)", 6, 1000.0, 8250.0, 9650.0),
    _lat("run_to_finish", "a", 3, 1000.0, 1000.0, 1000.0),
    _lat("run_to_finish", "b", 1, 3000.0, 3000.0, 3000.0),
    _lat("run_to_finish", "c", 2, 5250.0, 9525.0, 9905.0),
]

# Stragglers, per command (factor 2):
#   uptime runs [a 1000, a 500, b 3000, c 10000] -> median 2000 (pos 1.5), threshold 4000;
#     p95: a [500,1000] -> 975, b 3000, c 10000 -> c only
#   deploy runs [a 1000, c 500] -> median 750, threshold 1500; p95 a 1000, c 500 -> none
STRAGGLERS = [
    {"node": "c", "command": "uptime", "run_p95_ms": 10000.0, "command_median_ms": 2000.0},
]
