"""Shedding stale heartbeats while a reader is behind. Pure.

Theory of operation. A reader that cannot keep up (its last read filled a whole batch)
reads its queue oldest first, so under a sustained overload every message waits behind
all the others, and the wait grows until even a job's replies come older than the replay
window takes (``max_skew_s``) and are dropped as ``clock_skew``: no vote can pass, no job
can end. ``bench/overload.py`` showed it: 6,000 simulated nodes against a server reading
half of what they sent lost every ack. While behind, a reader therefore drops a heartbeat
stamped more than ``stale_ms`` ago before anything else is done with it: its node sends
another every interval, so a newer one is on its way, and dropping it costs a parse of the
body (about 1 µs) where reading it costs the whole path (signature, replay window,
liveness: about 15). The reader catches up on what is fresh, its queue's wait stays near
``stale_ms``, and replies, never shed, are read within it.

Nobody is judged on a shed heartbeat: the same reader puts off every offline check while
it is behind (``NodeIntake.expire``, ``EdgeIntake.expire``), and reads fresh heartbeats
again once it has caught up.

The look is at an unverified body, so it can only ever drop: a forgery stamped old is
dropped, as its signature would have had it dropped anyway; a forgery stamped fresh goes
the whole path and fails there; a reply is never dropped here, whatever it says its age is.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from pushjobs.protocol.messages import NodeHeartbeat

_BEAT = NodeHeartbeat.TYPE


def stale_heartbeat(frames: Sequence[bytes], before_ms: int) -> bool:
    """Whether ``frames`` look like a node heartbeat stamped before ``before_ms``."""
    if len(frames) != 3:
        return False
    try:
        body = orjson.loads(frames[1])
    except orjson.JSONDecodeError:
        return False  # not for this look to judge: the whole path counts it
    if type(body) is not dict or body.get("type") != _BEAT:
        return False
    stamp = body.get("timestamp")
    return type(stamp) is int and stamp < before_ms
