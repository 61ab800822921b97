"""The simulator's control lines: each parses to a request or to the answer refusing it."""

from __future__ import annotations

from agent.simulator.simcontrol import Control, parse


def test_simulator_control_lines_parse_or_refuse() -> None:
    assert parse("stats", 10) == Control("stats")
    assert parse("silence 2 5", 10) == Control("silence", 2, 5)
    assert parse("restart 5 11", 10) == {"ok": False, "error": "range must lie within 0..10"}
    assert parse("resume x", 10)["error"] == "usage: resume FIRST END (local indexes)"
    assert parse("", 10) == {"ok": False, "error": "empty command"}
    assert parse("fly 1 2", 10)["ok"] is False
