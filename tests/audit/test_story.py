"""A job's story from its records alone: who asked, who approved, what each node did."""

import orjson

from pushjobs.audit.story import tell
from pushjobs.log.base import Record


def rec(topic: str, offset: int, key: str, doc: object | None, ts: int = 0) -> Record:
    return Record(topic, offset, key, None if doc is None else orjson.dumps(doc), ts)


EVENTS = [
    rec(
        "e",
        0,
        "job:j1",
        {
            "ts": 10,
            "kind": "job_created",
            "job_id": "j1",
            "command": "uptime",
            "requested_by": "alice",
            "targets": 2,
        },
    ),
    rec("e", 1, "job:other", {"ts": 11, "kind": "job_created", "requested_by": "mallory"}),
    rec(
        "e",
        2,
        "job:j1",
        {
            "ts": 11,
            "kind": "job_state",
            "prev_state": "new",
            "state": "awaiting_approval",
            "approval": {"rule": "big-jobs", "expires_ms": 99},
        },
    ),
    # As the approvals write it: the decision in the job_state record of the move out.
    rec(
        "e",
        2,
        "job:j1",
        {
            "ts": 12,
            "kind": "job_state",
            "prev_state": "awaiting_approval",
            "state": "voting",
            "approval": {
                "rule": "big-jobs",
                "decision": "approved",
                "decided_by": "bob",
                "decided_ms": 12,
                "reason": None,
            },
        },
    ),
    rec(
        "e",
        3,
        "job:j1",
        {
            "ts": 13,
            "kind": "node_states",
            "nodes": [
                ["web-01", "ready", "new", 13, None, None, None],
                ["web-02", "nacked", "new", 13, None, None, "busy"],
            ],
        },
    ),
    rec(
        "e",
        4,
        "job:j1",
        {
            "ts": 14,
            "kind": "node_states",
            "nodes": [
                ["web-01", "succeeded", "running", 14, 0, 1, None],
            ],
        },
    ),
    rec(
        "e",
        5,
        "job:j1",
        {
            "ts": 15,
            "kind": "job_state",
            "prev_state": "running",
            "state": "complete",
            "summary": {"succeeded": 1, "nacked": 1},
        },
    ),
]


def test_who_asked_who_approved_and_what_each_node_did():
    story = tell("j1", [], EVENTS)
    assert (story.command, story.requested_by, story.requested_ts) == ("uptime", "alice", 10)
    assert [(s.what, s.by) for s in story.steps] == [
        ("created", "alice"),
        ("held for approval", None),
        ("new -> awaiting_approval", None),
        ("approved", "bob"),
        ("awaiting_approval -> voting", None),
        ("running -> complete", None),
    ]
    assert [n.state for n in story.nodes["web-01"]] == ["ready", "succeeded"]
    assert story.nodes["web-01"][-1].exit_status == 0
    assert story.nodes["web-02"][-1].reason == "busy"
    assert story.state == "complete"


def test_an_abort_names_its_caller_from_the_commands_topic():
    commands = [
        rec("c", 7, "job:j1", {"type": "abort", "job_id": "j1", "requested_by": "carol"}, 20)
    ]
    story = tell("j1", commands, EVENTS)
    assert ("abort requested", "carol") in [(s.what, s.by) for s in story.steps]


def test_a_job_the_log_does_not_hold_is_not_found():
    assert not tell("nope", [], EVENTS).found


def test_a_halted_job_says_why_it_stopped():
    halted = rec(
        "e",
        6,
        "job:j1",
        {
            "ts": 16,
            "kind": "job_state",
            "prev_state": "running",
            "state": "halted",
            "summary": {"succeeded": 1, "skipped": 3},
            "halt_reason": "halt-if check 'check-web': failed (exit 1)",
        },
    )
    story = tell("j1", [], [*EVENTS[:5], halted])
    assert story.steps[-1].what == "running -> halted"
    assert story.steps[-1].detail == (
        "succeeded 1, skipped 3; halt-if check 'check-web': failed (exit 1)"
    )
