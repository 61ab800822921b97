"""One job's story from the log alone: who asked, who approved, what each node did. Pure.

Theory of operation. ``tell`` reads a job's records, ``job:<id>``, from two topics:
``events`` (append-only: ``job_created`` names the command and who asked, ``job_state``
each change of the job, ``node_states`` each node's changes with exit status and reason,
``output`` a node's captured output) and ``commands`` (compacted: the start request while
it is the job's latest, and every later request, such as an abort, with its caller). The
events carry the history; the commands add who asked for what the events only show the
effect of (an abort). A job held for approval says so in the ``job_state`` records of its
moves into and out of ``awaiting_approval``: their ``approval`` holds the hold (``rule``)
and the decision (``decision`` approved, rejected or expired, ``decided_by``,
``decided_ms``, ``reason``), the durable account of who decided what (the decision's own
record on ``commands``, ``job:<id>/approval``, is compacted away with the job).

Nothing here checks the records: ``pushjobs audit verify`` says whether the log can be
trusted; ``story`` says what it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from pushjobs.log.base import Record


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happened to the job (or one of its nodes), with who did it."""

    ts: int
    what: str
    by: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class NodeStep:
    ts: int
    state: str
    prev_state: str | None
    exit_status: int | None
    reason: str | None


@dataclass(slots=True)
class Story:
    job_id: str
    command: str | None = None
    requested_by: str | None = None
    requested_ts: int | None = None
    state: str | None = None
    steps: list[Step] = field(default_factory=list)
    nodes: dict[str, list[NodeStep]] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return bool(self.steps or self.nodes or self.command)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "command": self.command,
            "requested_by": self.requested_by,
            "requested_ts": self.requested_ts,
            "state": self.state,
            "steps": [
                {"ts": s.ts, "what": s.what, "by": s.by, "detail": s.detail} for s in self.steps
            ],
            "nodes": {
                node: [
                    {
                        "ts": n.ts,
                        "state": n.state,
                        "prev_state": n.prev_state,
                        "exit_status": n.exit_status,
                        "reason": n.reason,
                    }
                    for n in steps
                ]
                for node, steps in sorted(self.nodes.items())
            },
        }


def _doc(rec: Record) -> dict[str, Any] | None:
    if rec.value is None:
        return None
    try:
        doc = orjson.loads(rec.value)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _ts(doc: dict[str, Any], rec: Record) -> int:
    ts = doc.get("ts")
    return ts if type(ts) is int else rec.timestamp_ms


def tell(job_id: str, commands: Iterable[Record], events: Iterable[Record]) -> Story:
    """The story of ``job_id`` from its records on ``commands`` and ``events``."""
    story = Story(job_id)
    key = f"job:{job_id}"
    for rec in commands:
        doc = _doc(rec) if rec.key == key else None
        if doc is None:
            continue
        kind = doc.get("type")
        by = doc.get("requested_by") or doc.get("by")
        if kind == "start":
            story.command = story.command or doc.get("command")
            story.requested_by = story.requested_by or by
            story.requested_ts = story.requested_ts or rec.timestamp_ms
        elif isinstance(kind, str):
            story.steps.append(Step(rec.timestamp_ms, f"{kind} requested", by))
    for rec in events:
        doc = _doc(rec) if rec.key == key else None
        if doc is None:
            continue
        _event(story, doc, rec)
    story.steps.sort(key=lambda s: s.ts)
    return story


def _event(story: Story, doc: dict[str, Any], rec: Record) -> None:
    kind, ts = doc.get("kind"), _ts(doc, rec)
    approval = doc.get("approval") if kind == "job_state" else None
    if isinstance(approval, dict):
        _approval(story, approval, doc, ts)
    if kind == "job_created":
        story.command = doc.get("command") or story.command
        story.requested_by = doc.get("requested_by") or story.requested_by
        story.requested_ts = ts
        story.state = "new"
        targets = doc.get("targets")
        story.steps.append(
            Step(ts, "created", story.requested_by, f"{targets} nodes targeted" if targets else "")
        )
    elif kind == "job_state":
        story.state = doc.get("state")
        summary = doc.get("summary")
        detail = ", ".join(f"{k} {v}" for k, v in summary.items()) if summary else ""
        if doc.get("halt_reason"):  # a batch job halted: its budget, or its health signal
            detail = f"{detail}; {doc['halt_reason']}" if detail else str(doc["halt_reason"])
        story.steps.append(Step(ts, f"{doc.get('prev_state')} -> {doc.get('state')}", None, detail))
    elif kind == "node_state" and isinstance(doc.get("node"), str):
        story.nodes.setdefault(doc["node"], []).append(
            NodeStep(ts, str(doc.get("state")), doc.get("prev_state"), doc.get("exit_status"), None)
        )
    elif kind == "node_states":
        for entry in doc.get("nodes") or ():
            if isinstance(entry, list) and len(entry) >= 7:
                node, state, prev, at, status, _duration, reason = entry[:7]
                story.nodes.setdefault(str(node), []).append(
                    NodeStep(at if type(at) is int else ts, state, prev, status, reason)
                )


def _approval(story: Story, approval: dict[str, Any], doc: dict[str, Any], ts: int) -> None:
    decision = approval.get("decision")
    if isinstance(decision, str):
        at = approval.get("decided_ms")
        by = approval.get("decided_by")
        story.steps.append(
            Step(
                at if type(at) is int else ts,
                decision,
                by if isinstance(by, str) else None,
                str(approval.get("reason") or ""),
            )
        )
    elif doc.get("state") == "awaiting_approval":
        rule = approval.get("rule")
        story.steps.append(Step(ts, "held for approval", None, f"rule {rule}" if rule else ""))
