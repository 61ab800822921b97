"""The schedule, key and server commands, given a reply of a shape they do not expect.

A server of another version, or a broken one, may answer with a field missing or of
another type: the command ends with one line on stderr and exit code 10, never a
traceback. Text in a reply (a key's name, a schedule's id, a server's endpoint) is shown
with its control characters written out, so it cannot forge a line of output.

The client is a fake (``userconfig.connect`` patched) answering every call with one
reply: what is tested is the CLI's reading of it, not the wire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from keys import files
from keys.identity import generate
from pushjobs.cli import userconfig
from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import Exit

runner = CliRunner()
SERVER = ("--server", "tcp://127.0.0.1:9")
UNEXPECTED = "error: unexpected reply from the server (another version?): "
FORGED = "x\nFORGED-LINE"


class FakeClient:
    """Answers every call with ``reply``, as a server of another version might."""

    endpoint = "tcp://127.0.0.1:9"

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def call(self, method: str, params: dict[str, Any]) -> Any:
        return self.reply

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def answer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """``answer(reply, *args)``: run ``pushjobs ARGS`` against a server answering ``reply``."""
    monkeypatch.delenv("PUSHJOBS_KEY_REGISTRY", raising=False)
    monkeypatch.setenv("PUSHJOBS_HOME", str(tmp_path / "home"))

    def run(reply: Any, *args: str) -> Result:
        monkeypatch.setattr(userconfig, "connect", lambda *_: FakeClient(reply))
        return runner.invoke(app, [*args, *SERVER])

    return run


def pubfile(tmp_path: Path) -> str:
    _, pub = files.save(generate("web-01", "node"), tmp_path, force=True)
    return str(pub)


SCHEDULE = {
    "schedule_id": "s1",
    "command": "true",
    "nodes": ["web-01"],
    "when": "once",
    "paused": False,
    "next_due_ms": 0,
}

CASES: list[tuple[tuple[str, ...], Any]] = [
    (("schedule", "add", "true", "web-01", "--in", "1m"), "a string"),
    (("schedule", "add", "true", "web-01", "--in", "1m"), {"schedule": {"schedule_id": "s1"}}),
    (("schedule", "list"), {"schedules": [{"schedule_id": "s1"}]}),
    # A time too far for this platform's clock: an OSError inside datetime.
    (("schedule", "list"), {"schedules": [{**SCHEDULE, "next_due_ms": 10**20}]}),
    (("schedule", "show", "s1"), {"schedule": None}),
    # The same in job list's local time (time.localtime).
    (
        ("job", "list"),
        {
            "total": 1,
            "jobs": [
                {"job_id": "j1", "command": "true", "state": "complete", "targets": 1}
                | {"summary": {}, "created_ms": 10**20}
            ],
        },
    ),
    (("schedule", "history", "s1"), {"fires": [{"due_ms": "yesterday"}]}),
    (("schedule", "pause", "s1"), {"schedule": {"paused": False}}),
    (("schedule", "resume", "s1"), "a string"),
    (("schedule", "delete", "s1"), "a string"),
    (("server", "status"), "a string"),
    (("server", "status"), {"server_id": "s", "incarnation": 1, "leader": True}),
    (("server", "list"), {"servers": [{"name": "a"}]}),
    (("key", "list"), {"keys": [["web-01", "node"]]}),
    (("key", "list"), "a string"),
    (("key", "show", "web-01"), {"key": {"name": "web-01"}}),
    (("key", "accept", "web-01"), {"results": [{"name": "web-01"}]}),
    (("key", "reject", "web-01"), {"results": None}),
    (("key", "delete", "web-01", "--yes"), {"results": [7]}),
    (("key", "role", "alice", "writer"), {"key": "alice"}),
]


@pytest.mark.parametrize(("args", "reply"), CASES)
def test_a_reply_of_another_shape_is_one_line_and_exit_10(
    answer: Any, args: tuple[str, ...], reply: Any
) -> None:
    result = answer(reply, *args)
    assert result.exit_code == Exit.ERROR, (result.exception, result.output)
    assert result.stderr.startswith(UNEXPECTED), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("reply", [{"key": ["web-01"]}, "a string"])
def test_key_add_given_a_reply_of_another_shape_is_one_line_and_exit_10(
    answer: Any, tmp_path: Path, reply: Any
) -> None:
    result = answer(reply, "key", "add", pubfile(tmp_path))
    assert result.exit_code == Exit.ERROR, (result.exception, result.output)
    assert result.stderr.startswith(UNEXPECTED) and result.stderr.count("\n") == 1


# --- text in a reply is written out --------------------------------------------------------


def _lines(result: Result) -> list[str]:
    assert result.exit_code in (0, Exit.FAILED), (result.exception, result.output)
    lines = result.output.splitlines()
    assert not any(line.startswith("FORGED-LINE") for line in lines), result.output
    return lines


def test_key_add_writes_out_the_names_it_is_told(answer: Any, tmp_path: Path) -> None:
    key = {"name": FORGED, "state": "pending", "role": None, "fingerprint": "ab:cd"}
    lines = _lines(answer({"key": key}, "key", "add", pubfile(tmp_path)))
    assert lines == ["x\\nFORGED-LINE: pending (ab:cd)"]


def test_key_show_writes_out_every_field(answer: Any) -> None:
    shown = {
        "key": {"name": "web-01", "kind": "node", "state": FORGED, "fingerprint": "ab"},
        "denied": [{"fingerprint": FORGED, "attempts": 2}],
    }
    lines = _lines(answer(shown, "key", "show", "web-01"))
    assert "state        x\\nFORGED-LINE" in lines
    assert lines[-1].startswith("denied       x\\nFORGED-LINE (the last of 2")


def test_key_moves_write_out_names_and_errors(answer: Any) -> None:
    results = [
        {"ok": True, "name": FORGED, "previous": "pending", "state": "accepted"},
        {"ok": False, "name": "web-02", "error": FORGED},
    ]
    result = answer({"results": results}, "key", "accept", "web-01", "web-02")
    assert _lines(result)[0] == "x\\nFORGED-LINE: pending -> accepted"
    assert result.stderr == "error: web-02: x\\nFORGED-LINE\n"


def test_key_role_writes_out_what_it_is_told(answer: Any) -> None:
    lines = _lines(
        answer({"key": {"name": "alice", "role": FORGED}}, "key", "role", "alice", "reader")
    )
    assert lines == ["alice: role x\\nFORGED-LINE"]


def test_schedule_delete_writes_out_what_was_deleted(answer: Any) -> None:
    lines = _lines(answer({"deleted": FORGED, "command": "true"}, "schedule", "delete", "s1"))
    assert lines == ["schedule x\\nFORGED-LINE deleted"]


def test_server_status_writes_out_the_servers_words(answer: Any) -> None:
    info = {
        "server_id": FORGED,
        "incarnation": 1,
        "leader": False,
        "log_outage": {"for_s": 3, "tries": 2, "error": "disk\x1b[2J full"},
    }
    lines = _lines(answer(info, "server", "status"))
    assert lines[0].startswith("server  x\\nFORGED-LINE (incarnation 1)")
    assert any(line.endswith("disk\\x1b[2J full") for line in lines)


def test_server_list_writes_out_what_each_server_wrote(answer: Any) -> None:
    row = {
        "name": "s1",
        "incarnation": 1,
        "role": "leader",
        "epoch": 3,
        "last_pong_ms_ago": 0,
        "api": FORGED,
        "heartbeat": "tcp://h:1",
        "reply": "tcp://r:1",
    }
    lines = _lines(answer({"servers": [row]}, "server", "list"))
    assert len(lines) == 2 and "x\\nFORGED-LINE" in lines[1]
