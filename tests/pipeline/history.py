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

# In the window: 32 usable events (the 37 less a's and b's first, d's, and J0's two).
IN_WINDOW = 32

# unknown_ms: the window is 100k long; c is unknown until its first event at 70k.
AVAILABILITY = [
    {"node": "a", "online_ms": 90_000, "offline_ms": 10_000, "unknown_ms": 0,
     "availability_pct": 90.0, "flaps": 1, "longest_outage_ms": 10_000},
    {"node": "b", "online_ms": 60_000, "offline_ms": 40_000, "unknown_ms": 0,
     "availability_pct": 60.0, "flaps": 2, "longest_outage_ms": 30_000},
    {"node": "c", "online_ms": 40_000, "offline_ms": 0, "unknown_ms": 60_000,
     "availability_pct": 100.0, "flaps": 0, "longest_outage_ms": 0},
    {"node": "d", "online_ms": 0, "offline_ms": 100_000, "unknown_ms": 0,
     "availability_pct": 0.0, "flaps": 0, "longest_outage_ms": 100_000},
]  # fmt: skip

_Z = {"succeeded": 0, "failed": 0, "timed_out": 0, "crashed": 0, "nacked": 0, "aborted": 0,
      "skipped": 0, "unavailable": 0, "late": 0}  # fmt: skip
# c was offline at J1's start: unavailable, never asked (no answer, as skipped is none).
OUTCOMES = [
    {"command": "deploy", "node": "a", "jobs": 1, **_Z, "crashed": 1},
    {"command": "deploy", "node": "c", "jobs": 1, **_Z, "succeeded": 1},
    {"command": "uptime", "node": "a", "jobs": 2, **_Z, "succeeded": 2},
    {"command": "uptime", "node": "b", "jobs": 2, **_Z, "failed": 1, "nacked": 1},
    {"command": "uptime", "node": "c", "jobs": 2, **_Z, "timed_out": 1, "unavailable": 1},
]
BY_COMMAND = [
    {"command": "deploy", "jobs": 1, "nodes": 2, **_Z, "succeeded": 1, "crashed": 1,
     "halted": 0},
    {"command": "uptime", "jobs": 2, "nodes": 3, **_Z, "succeeded": 2, "failed": 1,
     "timed_out": 1, "nacked": 1, "unavailable": 1, "halted": 0},
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

# Stragglers, per command (factor 2, at least one run): a node's median against the fleet's
#   uptime runs [a 1000, a 500, b 3000, c 10000] -> median 2000 (pos 1.5), threshold 4000;
#     node medians: a [500,1000] -> 750, b 3000, c 10000 -> c only, from 1 run, ratio 5
#   deploy runs [a 1000, c 500] -> median 750, threshold 1500; a 1000, c 500 -> none
# With at least two runs, c is not judged at all.
STRAGGLERS = [
    {"node": "c", "command": "uptime", "runs": 1, "run_p50_ms": 10000.0, "run_p95_ms": 10000.0,
     "command_median_ms": 2000.0, "ratio": 5.0},
]  # fmt: skip

# Downtime by UTC day (all of it on 1970-01-01): a 10k, b 40k, d 100k.
DOWNTIME_BY_DAY = [
    {"node": "a", "day": "1970-01-01", "offline_ms": 10_000},
    {"node": "b", "day": "1970-01-01", "offline_ms": 40_000},
    {"node": "d", "day": "1970-01-01", "offline_ms": 100_000},
]
# Node outcomes by day and command: deploy succeeded + crashed; uptime succeeded x2,
#   failed, timed_out, nacked (failures: failed, timed_out, crashed).
OUTCOMES_BY_DAY = [
    {"day": "1970-01-01", "command": "deploy", "outcomes": 2, "failures": 1},
    {"day": "1970-01-01", "command": "uptime", "outcomes": 5, "failures": 2},
]


# --- a second history: a server outage, a repeated node_offline, empty commands, and a
# last event that must count. Default window: [0, 100_001). Server gap rule at 10_000 ms.
GAP_MS = 10_000
SERVER_DOWN: list[dict[str, Any]] = [
    _live("n1", 0, True),
    _live("n2", 0, True),
    _live("n2", 5_000, False),
    _job("K1", 20_000, "voting", ""),
    _node("K1", "n1", 20_050, "new", "ready", ""),
    _job("K1", 20_100, "running", ""),
    _node("K1", "n1", 20_110, "ready", "running", ""),
    _node("K1", "n1", 21_000, "running", "succeeded", ""),
    # silence 21_000 .. 60_000, then n1 announced again although the log had it online:
    # a server started afresh. Gaps longer than 10k: 5k..20k (15k, but no re-announcement
    # within 10k of 20k: a quiet fleet, not a server outage) and 21k..60k (server gap).
    _live("n1", 60_000, True),
    _live("n2", 61_000, False),  # a repeat: the outage that began at 5k goes on
    _live("n2", 70_000, True),
    _live("n3", 80_000, True),  # a first announcement, not a re-announcement
    _live("n1", 90_000, False),
    _job("K2", 99_000, "voting", ""),
    _node("K2", "n3", 99_500, "new", "ready", ""),
    _job("K2", 99_600, "running", ""),
    _node("K2", "n3", 100_000, "ready", "succeeded", ""),  # the last event
]
for i, row in enumerate(SERVER_DOWN):
    row["offset"] = i

SERVER_GAPS = [(21_000, 60_000)]
# n1: online [0,90k) less the 39k gap = 51_000; offline [90k,100_001) = 10_001; 1 flap
# n2: online [0,5k) + [70k,100_001) = 35_001; offline [5k,61k) less 39k = 17_000, plus
#     [61k,70k) = 9_000 -> 26_000, one stretch (longest 26_000), one flap
# n3: online [80k,100_001) = 20_001, unknown before
SERVER_DOWN_AVAILABILITY = [
    {"node": "n1", "online_ms": 51_000, "offline_ms": 10_001, "unknown_ms": 39_000,
     "availability_pct": 100 * 51_000 / 61_001, "flaps": 1, "longest_outage_ms": 10_001},
    {"node": "n2", "online_ms": 35_001, "offline_ms": 26_000, "unknown_ms": 39_000,
     "availability_pct": 100 * 35_001 / 61_001, "flaps": 1, "longest_outage_ms": 26_000},
    {"node": "n3", "online_ms": 20_001, "offline_ms": 0, "unknown_ms": 80_000,
     "availability_pct": 100.0, "flaps": 0, "longest_outage_ms": 0},
]  # fmt: skip
_UNKNOWN = "(unknown)"
SERVER_DOWN_OUTCOMES = [
    {"command": _UNKNOWN, "node": "n1", "jobs": 1, **_Z, "succeeded": 1},
    {"command": _UNKNOWN, "node": "n3", "jobs": 1, **_Z, "succeeded": 1},  # the last event
]
SERVER_DOWN_BY_COMMAND = [
    {"command": _UNKNOWN, "jobs": 2, "nodes": 2, **_Z, "succeeded": 2, "halted": 0}
]
# votes [50 (n1), 500 (n3)], runs [900 (n1), 400 (n3)]; at q: lo + q * (hi - lo)
SERVER_DOWN_LATENCY_BY_COMMAND = [
    {"metric": "commit_to_ack", "command": _UNKNOWN, "count": 2, "p5": 72.5, "p25": 162.5,
     "p50": 275.0, "p75": 387.5, "p95": 477.5, "p99": 495.5},
    {"metric": "run_to_finish", "command": _UNKNOWN, "count": 2, "p5": 425.0, "p25": 525.0,
     "p50": 650.0, "p75": 775.0, "p95": 875.0, "p99": 895.0},
]  # fmt: skip


def healthy_tail() -> list[dict[str, Any]]:
    """Command ``k`` run 20 times on nodes x and y. y takes 100 ms each time; x too, but
    for two runs of 300 ms. Fleet median 100. x: median 100, p95 at position 18.05 of
    [100 x18, 300, 300] = 300, three times the fleet median: a tail, not a straggler.
    Node z runs 20 times in 250 ms: median 250 > 2 x 100 (fleet median of 60 runs: still
    100), so z is one, ratio 2.5."""
    rows = []
    for i in range(20):
        job, t0 = f"T{i}", i * 10_000
        rows.append(_job(job, t0, "running", "k"))
        for node, took in (("x", 300 if i in (3, 11) else 100), ("y", 100), ("z", 250)):
            rows.append(_node(job, node, t0 + took, "running", "succeeded", "k"))
    for i, row in enumerate(rows):
        row["offset"] = i
    return rows


HEALTHY_TAIL_STRAGGLERS = [
    {"node": "z", "command": "k", "runs": 20, "run_p50_ms": 250.0, "run_p95_ms": 250.0,
     "command_median_ms": 100.0, "ratio": 2.5},
]  # fmt: skip


# --- a third history: rolling-batch jobs (``job start --batch 1 --max-failures 1``).
# Window [0, 7_000). A batch job's node runs from its turn, and its end event's
# ``duration_ms`` says so: the time it waited for its turn is not run time.
def _batch(job: str, node: str, ts: int, prev: str, state: str, took: int | None = None):
    return {**_node(job, node, ts, prev, state, "patch"), "duration_ms": took}


BATCH_UNTIL = 7_000
BATCH: list[dict[str, Any]] = [
    # B1 on p, q, r, s, one at a time; one failure halts it.
    _job("B1", 1_000, "voting", "patch"),
    _batch("B1", "p", 1_010, "new", "ready"),
    _batch("B1", "q", 1_020, "new", "ready"),
    _batch("B1", "r", 1_030, "new", "ready"),
    _batch("B1", "s", 1_040, "new", "ready"),
    _job("B1", 2_000, "running", "patch"),
    _batch("B1", "q", 2_000, "ready", "waiting", 0),
    _batch("B1", "r", 2_000, "ready", "waiting", 0),
    _batch("B1", "s", 2_000, "ready", "waiting", 0),
    _batch("B1", "p", 2_010, "ready", "running", 10),
    _batch("B1", "p", 3_000, "running", "succeeded", 1_000),  # its turn came at 2_000
    _batch("B1", "q", 3_000, "waiting", "ready", 0),  # q's turn: 3_000
    _batch("B1", "q", 3_010, "ready", "running", 10),
    _batch("B1", "s", 4_000, "waiting", "aborted", 2_000),  # s let its held commit go
    _batch("B1", "q", 5_000, "running", "failed", 2_000),  # 3_000 after the job's runs
    _batch("B1", "r", 5_000, "waiting", "skipped", 3_000),  # never ran
    {**_job("B1", 5_000, "halted", "patch"), "prev_state": "running"},
    # B2 on t, u: t runs, u waits its turn, both still at it when the window ends.
    _job("B2", 6_000, "voting", "patch"),
    _batch("B2", "t", 6_010, "new", "ready"),
    _batch("B2", "u", 6_020, "new", "ready"),
    _job("B2", 6_100, "running", "patch"),
    _batch("B2", "u", 6_100, "ready", "waiting", 0),
    _batch("B2", "t", 6_110, "ready", "running", 10),
]
for i, row in enumerate(BATCH):
    row["offset"] = i

# Each node is in one job; r was skipped, s aborted; t and u are in jobs only.
BATCH_OUTCOMES = [
    {"command": "patch", "node": "p", "jobs": 1, **_Z, "succeeded": 1},
    {"command": "patch", "node": "q", "jobs": 1, **_Z, "failed": 1},
    {"command": "patch", "node": "r", "jobs": 1, **_Z, "skipped": 1},
    {"command": "patch", "node": "s", "jobs": 1, **_Z, "aborted": 1},
    {"command": "patch", "node": "t", "jobs": 1, **_Z},
    {"command": "patch", "node": "u", "jobs": 1, **_Z},
]
BATCH_BY_COMMAND = [
    {"command": "patch", "jobs": 2, "nodes": 6, **_Z, "succeeded": 1, "failed": 1,
     "aborted": 1, "skipped": 1, "halted": 1},
]  # fmt: skip
# Answered: succeeded, failed, aborted (skipped never ran) -> 1 failure of 3: 33.33 %.
BATCH_OUTCOMES_BY_DAY = [{"day": "1970-01-01", "command": "patch", "outcomes": 3, "failures": 1}]
# commit_to_ack [10 (p), 20 (q), 30 (r), 40 (s), 10 (t), 20 (u)] sorted [10,10,20,20,30,40]:
#   p50 pos 2.5 -> 20, p95 pos 4.75 -> 30 + 0.75 * 10 = 37.5, p99 pos 4.95 -> 39.5
# run_to_finish: p 1_000, q 2_000 (its own run, not the 3_000 since the job's runs):
#   p50 1_500, p95 1_000 + 0.95 * 1_000 = 1_950, p99 1_990
BATCH_LATENCY = [
    _lat("commit_to_ack", "(fleet)", 6, 20.0, 37.5, 39.5),
    _lat("commit_to_ack", "p", 1, 10.0, 10.0, 10.0),
    _lat("commit_to_ack", "q", 1, 20.0, 20.0, 20.0),
    _lat("commit_to_ack", "r", 1, 30.0, 30.0, 30.0),
    _lat("commit_to_ack", "s", 1, 40.0, 40.0, 40.0),
    _lat("commit_to_ack", "t", 1, 10.0, 10.0, 10.0),
    _lat("commit_to_ack", "u", 1, 20.0, 20.0, 20.0),
    _lat("run_to_finish", "(fleet)", 2, 1_500.0, 1_950.0, 1_990.0),
    _lat("run_to_finish", "p", 1, 1_000.0, 1_000.0, 1_000.0),
    _lat("run_to_finish", "q", 1, 2_000.0, 2_000.0, 2_000.0),
]
# Per command, at q * (n - 1): votes pos 0.25 -> 10, 1.25 -> 12.5, 2.5 -> 20, 3.75 -> 27.5,
#   4.75 -> 37.5, 4.95 -> 39.5; runs [1_000, 2_000] at q -> 1_000 + q * 1_000
BATCH_LATENCY_BY_COMMAND = [
    {"metric": "commit_to_ack", "command": "patch", "count": 6, "p5": 10.0, "p25": 12.5,
     "p50": 20.0, "p75": 27.5, "p95": 37.5, "p99": 39.5},
    {"metric": "run_to_finish", "command": "patch", "count": 2, "p5": 1_050.0, "p25": 1_250.0,
     "p50": 1_500.0, "p75": 1_750.0, "p95": 1_950.0, "p99": 1_990.0},
]  # fmt: skip


# --- a fourth history: jobs that wait for offline nodes (``job start --offline-wait``).
# Window [LATE_SINCE, LATE_SINCE + DAY) = 1970-01-03, so marks are read from 1970-01-02 on.
# A late node is asked (``offline`` -> ``new``) when it comes back, hours after the job's
# voting: its commit_to_ack runs from then, not from the job's voting.
DAY, HOUR = 86_400_000, 3_600_000
LATE_SINCE = 2 * DAY
LATE_UNTIL = LATE_SINCE + DAY
_B = "backup"


def _wait(job: str, node: str, ts: int, prev: str, state: str, took: int | None = None):
    return {**_node(job, node, ts, prev, state, _B), "duration_ms": took}


_W1, _W2, _W3 = LATE_SINCE + 1_000, LATE_SINCE + 10 * HOUR, DAY - 1_000
OFFLINE_WAIT: list[dict[str, Any]] = [
    # W1 (--offline-wait 8h) on x, y, z: y and z offline at start. x votes in 40 ms and
    # runs 500. y is back 3 h later: asked then, votes 30 ms after, runs 1_000. z never
    # comes back: unavailable at the deadline, and the job completes then.
    _job("W1", _W1, "voting", _B),
    _wait("W1", "y", _W1, "new", "offline"),
    _wait("W1", "z", _W1, "new", "offline"),
    _wait("W1", "x", _W1 + 40, "new", "ready"),
    _job("W1", _W1 + 200, "running", _B),
    _wait("W1", "x", _W1 + 205, "ready", "running", 0),
    _wait("W1", "x", _W1 + 705, "running", "succeeded", 500),
    _wait("W1", "y", _W1 + 3 * HOUR, "offline", "new"),
    _wait("W1", "y", _W1 + 3 * HOUR + 30, "new", "ready"),
    _wait("W1", "y", _W1 + 3 * HOUR + 35, "ready", "running", 0),
    _wait("W1", "y", _W1 + 3 * HOUR + 1_035, "running", "failed", 1_000),
    _wait("W1", "z", _W1 + 8 * HOUR, "offline", "unavailable"),
    {**_job("W1", _W1 + 8 * HOUR, "complete", _B), "prev_state": "running"},
    # W2 (no offline wait) on x and v: v offline at start is unavailable at once; x votes
    # in 50 ms and runs 2_000.
    _job("W2", _W2, "voting", _B),
    _wait("W2", "v", _W2, "new", "unavailable"),
    _wait("W2", "x", _W2 + 50, "new", "ready"),
    _job("W2", _W2 + 200, "running", _B),
    _wait("W2", "x", _W2 + 205, "ready", "running", 0),
    _wait("W2", "x", _W2 + 2_205, "running", "succeeded", 2_000),
    # W3 (--offline-wait 2d) started before the marks are read (1970-01-01): its voting
    # mark is not found, but u's own is: asked 10 ms before the window, a nack 20 ms into
    # it. u is late before the window (not counted late), its vote in it (30 ms).
    _job("W3", _W3, "voting", _B),
    _wait("W3", "u", _W3, "new", "offline"),
    _wait("W3", "u", LATE_SINCE - 10, "offline", "new"),
    _wait("W3", "u", LATE_SINCE + 20, "new", "nacked"),
]
for i, row in enumerate(OFFLINE_WAIT):
    row["offset"] = i

# In the window: W1's 13 events and W2's 6, and u's nack.
OFFLINE_WAIT_IN_WINDOW = 20
# x: W1 and W2, succeeded twice; y: late, failed; z: unavailable (given up at the deadline,
# its new -> offline also in the window: one job); v: unavailable (offline at start); u:
# nacked, its offline -> new before the window.
OFFLINE_WAIT_OUTCOMES = [
    {"command": _B, "node": "u", "jobs": 1, **_Z, "nacked": 1},
    {"command": _B, "node": "v", "jobs": 1, **_Z, "unavailable": 1},
    {"command": _B, "node": "x", "jobs": 2, **_Z, "succeeded": 2},
    {"command": _B, "node": "y", "jobs": 1, **_Z, "failed": 1, "late": 1},
    {"command": _B, "node": "z", "jobs": 1, **_Z, "unavailable": 1},
]
OFFLINE_WAIT_BY_COMMAND = [
    {"command": _B, "jobs": 3, "nodes": 5, **_Z, "succeeded": 2, "failed": 1, "nacked": 1,
     "unavailable": 2, "late": 1, "halted": 0},
]  # fmt: skip
# Answered: succeeded 2, failed 1, nacked 1 (unavailable is no answer): 1 failure of 4.
OFFLINE_WAIT_OUTCOMES_BY_DAY = [{"day": "1970-01-03", "command": _B, "outcomes": 4, "failures": 1}]
# commit_to_ack: u 30 (from its own mark), x 40 and 50, y 30 (from its own mark, not
#   3 h + 30 from W1's voting): [30, 30, 40, 50] p50 pos 1.5 -> 35, p95 pos 2.85 -> 48.5,
#   p99 pos 2.97 -> 49.7; x [40, 50]: 45, 49.5, 49.9
# run_to_finish: x 500 and 2_000, y 1_000: [500, 1_000, 2_000] p50 1_000, p95 pos 1.9 ->
#   1_900, p99 pos 1.98 -> 1_980; x [500, 2_000]: 1_250, 1_925, 1_985
OFFLINE_WAIT_LATENCY = [
    _lat("commit_to_ack", "(fleet)", 4, 35.0, 48.5, 49.7),
    _lat("commit_to_ack", "u", 1, 30.0, 30.0, 30.0),
    _lat("commit_to_ack", "x", 2, 45.0, 49.5, 49.9),
    _lat("commit_to_ack", "y", 1, 30.0, 30.0, 30.0),
    _lat("run_to_finish", "(fleet)", 3, 1_000.0, 1_900.0, 1_980.0),
    _lat("run_to_finish", "x", 2, 1_250.0, 1_925.0, 1_985.0),
    _lat("run_to_finish", "y", 1, 1_000.0, 1_000.0, 1_000.0),
]
# Per command, at q * (n - 1): votes [30, 30, 40, 50] at 0.15 -> 30, 0.75 -> 30, 1.5 -> 35,
#   2.25 -> 42.5, 2.85 -> 48.5, 2.97 -> 49.7; runs [500, 1_000, 2_000] at 0.1 -> 550,
#   0.5 -> 750, 1 -> 1_000, 1.5 -> 1_500, 1.9 -> 1_900, 1.98 -> 1_980
OFFLINE_WAIT_LATENCY_BY_COMMAND = [
    {"metric": "commit_to_ack", "command": _B, "count": 4, "p5": 30.0, "p25": 30.0,
     "p50": 35.0, "p75": 42.5, "p95": 48.5, "p99": 49.7},
    {"metric": "run_to_finish", "command": _B, "count": 3, "p5": 550.0, "p25": 750.0,
     "p50": 1_000.0, "p75": 1_500.0, "p95": 1_900.0, "p99": 1_980.0},
]  # fmt: skip
