"""The archived form of an event record, and checking one record. Pure.

A record the server wrote to the ``events`` topic becomes one row with the log offset it
had; a record that is not a usable event is *rejected* with a reason, never dropped
silently: the archiver counts it and keeps it aside with its offset.

A ``node_states`` record (a job's node changes of one turn, ``server.core.records``)
becomes one ``node_state`` row per entry, each with the record's offset, as if each
change had been a record of its own: the archive, the reports and their independent
check see the same rows either way. A ``node_liveness`` record (the nodes that went
online or offline in a turn) becomes one ``node_online`` or ``node_offline`` row per entry
alike; a node appears once in such a record, so a node's rows keep their order on
``(ts, offset)``. One bad entry rejects the whole record (kept aside whole): the server
wrote it, so it is damage, not one node's news.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from pushjobs.errors import Rejected

KINDS: Final = frozenset(
    {"job_created", "job_state", "node_state", "node_online", "node_offline", "output"}
)

# (column, arrow type name) in file order; the archive and every reader agree on this.
COLUMNS: Final = (
    ("offset", "int64"),
    ("ts", "int64"),
    ("kind", "string"),
    ("job_id", "string"),
    ("node", "string"),
    ("state", "string"),
    ("prev_state", "string"),
    ("command", "string"),
    ("exit_status", "int64"),
    ("duration_ms", "int64"),
    ("server", "string"),
)
STRING_FIELDS: Final = ("kind", "job_id", "node", "state", "prev_state", "command", "server")
INT_FIELDS: Final = ("exit_status", "duration_ms")
NEEDS: Final = {
    "job_created": ("job_id",),
    "job_state": ("job_id", "state"),
    "node_state": ("job_id", "node", "state"),
    "node_online": ("node",),
    "node_offline": ("node",),
    "output": ("job_id", "node"),
}
MAX_TS_MS: Final = 253402300799999  # 9999-12-31: later is a corrupt clock, not a date


NODE_LIVENESS: Final = "node_liveness"
LIVENESS_FIELDS: Final = ("node", "state", "ts", "reason")
"""A ``node_liveness`` entry, in order (``server.core.records.LIVENESS_FIELDS``)."""
LIVENESS_KINDS: Final = {"online": "node_online", "offline": "node_offline"}

NODE_STATES: Final = "node_states"
ENTRY_FIELDS: Final = ("node", "state", "prev_state", "ts", "exit_status", "duration_ms", "reason")
"""A ``node_states`` entry, in order (``server.core.records.NODE_STATE_FIELDS``)."""
_SHARED: Final = ("job_id", "command", "server")


def parse(offset: int, value: bytes | None) -> dict[str, Any]:
    """The archived row of one ``events`` record of a single event, or ``Rejected``."""
    found = rows(offset, value)
    if len(found) != 1:
        raise Rejected(f"{len(found)} events in one record")
    return found[0]


def rows(offset: int, value: bytes | None) -> list[dict[str, Any]]:
    """The archived rows of one ``events`` record (several for ``node_states``), or
    ``Rejected``."""
    if value is None:
        raise Rejected("tombstone")
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise Rejected("not JSON") from None
    if not isinstance(obj, dict):
        raise Rejected("not a JSON object")
    kind = obj.get("kind")
    if kind == NODE_STATES:
        return _entries(offset, obj, ENTRY_FIELDS, _SHARED, lambda entry: "node_state")
    if kind == NODE_LIVENESS:
        return _entries(offset, obj, LIVENESS_FIELDS, ("server",), _liveness_kind)
    return [_row(offset, obj)]


def _liveness_kind(entry: dict[str, Any]) -> str:
    kind = LIVENESS_KINDS.get(entry["state"]) if isinstance(entry["state"], str) else None
    if kind is None:
        raise Rejected(f"a node_liveness entry's state is not one of {', '.join(LIVENESS_KINDS)}")
    return kind


def _entries(
    offset: int,
    obj: dict[str, Any],
    fields: tuple[str, ...],
    shared_fields: tuple[str, ...],
    kind_of: Callable[[dict[str, Any]], str],
) -> list[dict[str, Any]]:
    """The rows of a record of several events (``node_states``, ``node_liveness``): one
    per entry of its ``nodes``, with the fields all share."""
    what = obj["kind"]
    entries = obj.get("nodes")
    if not isinstance(entries, list) or not entries:
        raise Rejected(f"{what} without nodes")
    shared = {name: obj.get(name) for name in shared_fields}
    out = []
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != len(fields):
            raise Rejected(f"a {what} entry is not a list of {len(fields)}")
        one = {**shared, **dict(zip(fields, entry, strict=True))}
        try:
            one["kind"] = kind_of(one)
            out.append(_row(offset, one))
        except Rejected as exc:
            raise Rejected(f"a {what} entry: {exc}") from None
    return out


def _row(offset: int, obj: dict[str, Any]) -> dict[str, Any]:
    ts = obj.get("ts")
    if type(ts) is not int or not 0 <= ts <= MAX_TS_MS:
        raise Rejected("ts is not a time in ms")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise Rejected(f"unknown kind {str(kind)[:40]!r}")
    row: dict[str, Any] = {"offset": offset, "ts": ts}
    for name in STRING_FIELDS:
        v = obj.get(name)
        if v is not None and not isinstance(v, str):
            raise Rejected(f"{name} is not a string")
        row[name] = v
    for name in INT_FIELDS:
        v = obj.get(name)
        if v is not None and type(v) is not int:
            raise Rejected(f"{name} is not an integer")
        row[name] = v
    for name in NEEDS[kind]:
        if not row[name]:
            raise Rejected(f"{kind} without {name}")
    return row


def day(ts_ms: int) -> str:
    """The UTC date partition of a timestamp: ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
