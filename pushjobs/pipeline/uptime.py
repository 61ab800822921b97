"""Node availability, flaps and outages, and when the server itself was down. Pure.

The reference for ``availability`` (``metrics.py`` computes everything else); the Spark
job computes the same from the same definitions (``spark_liveness.py``).

A node's state holds from one liveness event (``node_online`` / ``node_offline``) to the
next (the last one to ``until``); a state set *before* ``since`` counts from ``since``;
before a node's first event its state is unknown.

**Server downtime.** The events topic holds no record of a server stopping, and a
healthy, quiet fleet writes nothing for hours, so silence alone proves nothing. What a
server does leave is its start: a server (a restarted one, or a standby taking over)
announces every node it hears with ``node_online``, including nodes the log already had
online. Such a *re-announcement* (a ``node_online`` whose node's previous liveness event
was ``node_online`` too) is the mark of a server that started afresh. So:

    a *server gap* is the time between two consecutive events (any kind, any server, in
    ``(ts, offset)`` order) that are more than ``gap_ms`` apart, when a re-announcement
    follows within ``gap_ms`` of the gap's end.

Within a server gap every node's state is *unknown*: neither online nor offline. The gap
starts at the last event before the silence, because the log cannot tell when in the
silence the server stopped; a restart quicker than ``gap_ms`` is not seen at all.

Per node, within the window ``[since, until)``:

- ``online_ms`` / ``offline_ms``: known time in each state; ``unknown_ms`` the rest of the
  window (before its first event, or in server gaps);
- ``availability_pct`` = online / (online + offline) x 100 (None when nothing is known);
- ``flaps``: transitions to offline in the window: ``node_offline`` events whose previous
  liveness event was not already ``node_offline`` (a repeated one changes nothing);
- ``downtime by day``: each node's known offline time per UTC day (days with none left out);
- ``longest_outage_ms``: the longest *outage*, the stretch from a transition to offline
  to the next ``node_online`` (repeated ``node_offline`` events do not split it), counting
  its known offline time in the window.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

ONLINE, OFFLINE = "node_online", "node_offline"
DAY_MS = 86_400_000


def reannouncements(liveness: Iterable[tuple[int, int, str, str]]) -> list[int]:
    """Times of re-announcements among ``(ts, offset, kind, node)`` in (ts, offset) order."""
    last: dict[str, str] = {}
    out = []
    for ts, _, kind, node in liveness:
        if kind == ONLINE and last.get(node) == ONLINE:
            out.append(ts)
        last[node] = kind
    return sorted(out)


def server_gaps(
    points: Sequence[int], reannounced: Sequence[int], gap_ms: int
) -> list[tuple[int, int]]:
    """The server gaps among event times ``points`` (sorted), per the module's rule.

    ``points`` need not hold every event: a pair of neighbours with events missing between
    them is never taken for a gap as long as every event within ``gap_ms`` before each
    re-announcement is there, with the last one before that range.
    """
    gaps = []
    for a, b in itertools.pairwise(points):
        if b - a > gap_ms:
            i = bisect.bisect_left(reannounced, b)
            if i < len(reannounced) and reannounced[i] <= b + gap_ms:
                gaps.append((a, b))
    return gaps


def near_reannouncements(reannounced: Sequence[int], gap_ms: int) -> list[tuple[int, int]]:
    """The merged ranges ``[t - gap_ms, t]`` whose events ``server_gaps`` needs."""
    ranges: list[tuple[int, int]] = []
    for t in sorted(reannounced):
        if ranges and t - gap_ms <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], t)
        else:
            ranges.append((t - gap_ms, t))
    return ranges


def overlap(start: int, end: int, gaps: Sequence[tuple[int, int]]) -> int:
    return sum(max(0, min(end, g1) - max(start, g0)) for g0, g1 in gaps)


def availability(
    liveness: Sequence[tuple[int, int, str, str]],
    since: int,
    until: int,
    gaps: Sequence[tuple[int, int]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows per node, and per (node, UTC day) with downtime, from ``(ts, offset, kind,
    node)`` events in (ts, offset) order."""
    daily: dict[tuple[str, int], int] = defaultdict(int)
    timeline: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for ts, _, kind, node in liveness:
        if ts < until:
            timeline[node].append((ts, kind))
    out = []
    for node in sorted(timeline):
        points = timeline[node]
        online_ms = offline_ms = longest = stretch = flaps = 0
        for i, (start, kind) in enumerate(points):
            end = points[i + 1][0] if i + 1 < len(points) else until
            lo, hi = max(start, since), min(end, until)
            span = max(0, hi - lo) - (overlap(lo, hi, gaps) if hi > lo else 0)
            if kind == ONLINE:
                online_ms += span
                stretch = 0
                continue
            if i == 0 or points[i - 1][1] != OFFLINE:  # a transition, not a repeat
                stretch = 0
                flaps += since <= start
            offline_ms += span
            stretch += span
            if span:
                for day, ms in by_day(lo, hi, gaps):
                    daily[(node, day)] += ms
            longest = max(longest, stretch)
        known = online_ms + offline_ms
        out.append(
            {
                "node": node,
                "online_ms": online_ms,
                "offline_ms": offline_ms,
                "unknown_ms": (until - since) - known,
                "availability_pct": 100.0 * online_ms / known if known else None,
                "flaps": flaps,
                "longest_outage_ms": longest,
            }
        )
    days = [
        {"node": n, "day": day_name(d), "offline_ms": ms}
        for (n, d), ms in sorted(daily.items())
        if ms
    ]
    return out, days


def by_day(lo: int, hi: int, gaps: Sequence[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """(midnight, known ms) of ``[lo, hi)`` cut at UTC midnights, less the gaps."""
    day = lo - lo % DAY_MS
    while day < hi:
        a, b = max(lo, day), min(hi, day + DAY_MS)
        yield day, (b - a) - overlap(a, b, gaps)
        day += DAY_MS


def day_name(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d")
