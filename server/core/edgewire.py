"""The channel between the leader and its edges: what each says to the other, in frames. Pure.

Every message is one multipart message: the kind, then its parts. The channel is a
CurveZMQ ROUTER (the leader) / DEALER (each edge) pair under the server's own key on both
ends, so only processes holding the server's identity speak on it; the parts are still
checked here, and a message that does not parse is refused (``MalformedMessage``), never a
crash of either loop.

Leader -> edge (one message per kind and turn, lists inside: per batch, never per node):

    beat      the signed server heartbeat, as published: the edge publishes one of its own for it
    keys      a numbered batch of the session keys issued at discovery: [node, key id,
              secret (b64), restarted, node curve key, command endpoint]; the edge's
              reports say the last batch it holds, and the leader holds each node's
              config reply until then (the edge's sockets admit only keys it was given)
    revoke    nodes whose key was revoked: [node, [job ids to abort now]]
    send      one command kind for one job to many nodes: {kind, job, nodes, body}
    forget    nodes that now belong to another edge
    move      nodes asked to rediscover: their edge is draining
    grant     the edge's lease on sending commands: {sent: the stamp of the latest report
              read, for_ms} (``server.core.edgelease``)

Edge -> leader, per turn:

    hello     the edge's name, its advertised endpoints, its pid, a stamp (``sent``)
    serving   after a hello, the nodes it serves already (it served another leader), in
              chunks: {nodes: [[node, key ids, curve key, command endpoint, incarnation,
              online, facts, tags], ...]} (``Served``)
    report    a stamp (``sent``: the edge's clock, echoed by the grant that answers it),
              liveness changes (online, offline, restarted), the heartbeats the leader
              needs (``edgeforward``), and the edge's load; job replies follow as parts,
              each the body of a verified node message
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from pushjobs.errors import MalformedMessage

BEAT = b"beat"
KEYS = b"keys"
REVOKE = b"revoke"
SEND = b"send"
FORGET = b"forget"
MOVE = b"move"  # ask these nodes to rediscover: their edge is draining
GRANT = b"grant"  # the edge may send commands until its stamp plus for_ms
HELLO = b"hello"
REPORT = b"report"
SERVING = b"serving"  # nodes the edge serves already, for a new leader to take
SERVING_CHUNK = 5_000  # nodes per serving message: far below the channel's size limit

TO_EDGE = frozenset({BEAT, KEYS, REVOKE, SEND, FORGET, MOVE, GRANT})
TO_LEADER = frozenset({HELLO, REPORT, SERVING})


@dataclass(slots=True)
class Report:
    """What an edge tells the leader after a turn."""

    online: list[tuple[str, str, str]] = field(default_factory=list)  # node, incarnation, endpoint
    offline: list[tuple[str, str]] = field(default_factory=list)  # node, reason
    restarted: list[tuple[str, str]] = field(default_factory=list)  # node, new incarnation
    # node, job id, job state, the heartbeat's own timestamp (wall ms)
    beats: list[tuple[str, str | None, str | None, int]] = field(default_factory=list)
    replies: list[bytes] = field(default_factory=list)  # bodies of verified messages
    load: dict[str, Any] = field(default_factory=dict)
    keys_applied: int = 0  # the last batch of session keys the edge holds (``keys``)
    sent: int | None = None  # the edge's stamp (``edgelease.stamp``), echoed in its grant

    def __bool__(self) -> bool:
        return bool(self.online or self.offline or self.restarted or self.beats or self.replies)


def encode(kind: bytes, payload: Any) -> list[bytes]:
    return [kind, orjson.dumps(payload)]


def encode_report(report: Report) -> list[bytes]:
    head = {
        "online": report.online,
        "offline": report.offline,
        "restarted": report.restarted,
        "beats": report.beats,
        "load": report.load,
        "keys_applied": report.keys_applied,
        "sent": report.sent,
    }
    return [REPORT, orjson.dumps(head), *report.replies]


def decode(frames: Sequence[bytes], kinds: frozenset[bytes]) -> tuple[bytes, Any, list[bytes]]:
    """(kind, payload, the parts after the payload); MalformedMessage if it does not parse."""
    if len(frames) < 2 or frames[0] not in kinds:
        raise MalformedMessage(f"not a message of the edge channel: {bytes(frames[0])[:32]!r}")
    kind = bytes(frames[0])
    if kind == BEAT:
        return kind, None, [bytes(f) for f in frames[1:]]
    try:
        payload = orjson.loads(frames[1])
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"edge channel {kind.decode()}: {exc}") from exc
    return kind, payload, [bytes(f) for f in frames[2:]]


def decode_report(payload: Any, rest: list[bytes]) -> Report:
    """A report's payload checked field by field: a wrong shape is MalformedMessage."""
    try:
        return Report(
            online=[(str(n), str(i), str(e)) for n, i, e in payload["online"]],
            offline=[(str(n), str(r)) for n, r in payload["offline"]],
            restarted=[(str(n), str(i)) for n, i in payload["restarted"]],
            beats=[
                (str(n), None if j is None else str(j), None if s is None else str(s), int(t))
                for n, j, s, t in payload["beats"]
            ],
            replies=rest,
            load=dict(payload.get("load") or {}),
            keys_applied=int(payload.get("keys_applied", 0)),
            sent=stamp_of(payload),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedMessage(f"edge report: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class Served:
    """A node an edge serves already, as its ``serving`` messages hand it to a new leader."""

    node: str
    key_ids: tuple[str, ...]
    curve: str
    endpoint: str
    incarnation: str
    online: bool
    facts: dict[str, str]
    tags: tuple[str, ...]


def decode_served(payload: Any) -> tuple[list[Served], int]:
    """A serving message's nodes, and how many entries did not parse (left out, counted)."""
    raw = payload.get("nodes") if isinstance(payload, dict) else None
    if not isinstance(raw, list):
        raise MalformedMessage("edge serving: nodes must be a list")
    out, bad = [], 0
    for entry in raw:
        try:
            node, key_ids, curve, endpoint, incarnation, online, facts, tags = entry
            if not isinstance(key_ids, list) or not isinstance(facts, dict):
                raise TypeError("key ids and facts")
            out.append(
                Served(
                    _text(node),
                    tuple(_text(k) for k in key_ids),
                    _text(curve),
                    _text(endpoint),
                    _text(incarnation),
                    online is True,
                    {_text(k): _text(v) for k, v in facts.items()},
                    tuple(_text(t) for t in tags),
                )
            )
        except (TypeError, ValueError):
            bad += 1
    return out, bad


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"not text: {type(value).__name__}")
    return value


def stamp_of(payload: Any) -> int | None:
    """A hello's or report's stamp, if it carries a whole number (a bool is not one)."""
    sent = payload.get("sent")
    return sent if type(sent) is int else None


def encode_grant(sent: int, for_ms: int) -> list[bytes]:
    return encode(GRANT, {"sent": sent, "for_ms": for_ms})


def decode_grant(payload: Any) -> tuple[int, int]:
    """(stamp, for_ms) of a grant; MalformedMessage if either is not a whole number."""
    try:
        sent, for_ms = payload["sent"], payload["for_ms"]
    except (KeyError, TypeError) as exc:
        raise MalformedMessage(f"edge grant: {exc!r}") from exc
    if type(sent) is not int or type(for_ms) is not int:
        raise MalformedMessage("edge grant: stamp and duration must be whole numbers")
    return sent, for_ms
