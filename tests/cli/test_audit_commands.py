"""``pushjobs audit verify`` and ``pushjobs audit show`` at the command line.

The log is a small SQLite file written in the test by the servers' own writer code: a
``ChainedLog`` over a ``SqliteLog`` appending as the leader does (fenced; the start request
and the event records made by ``server.core.records``), and ``Checkpoints`` signing with a
server key saved as ``pushjobs key gen`` saves one. The commands run in-process (typer's
``CliRunner``) as an auditor types them; what is checked is what the auditor gets: the
exit code, what stdout and stderr say, the ``--json`` shape, and a plain error rather
than a traceback when a file is missing or wrong.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from keys import files
from keys.fingerprint import key_id
from keys.identity import generate
from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import Exit
from pushjobs.clock import FakeClock
from pushjobs.log.base import Fence
from pushjobs.log.sqlite.sqlite_file import OFFSET_BITS
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from pushjobs.log.topics import create_standard_topics, names, policies
from pushjobs.protocol.signing import Ed25519Signer
from server.core import records
from server.shell.audittrail import ChainedLog, Checkpoints, audited

TOPICS = names()
JOB = "18c0ffee0001"
TS = 1_700_000_000_000


@dataclass(frozen=True)
class Installation:
    log: Path
    key: Path  # the server's public key
    other: Path  # another server's public key
    user: Path  # a user's public key


def event(kind: str, ts: int, **fields: object) -> tuple[str, bytes]:
    return f"job:{JOB}", orjson.dumps(records.event(kind, ts, "server", job_id=JOB, **fields))


def write_job(log: SqliteLog, path: Path, server_key: Path) -> None:
    """A job held for approval, approved by bob, run on web-01, as the leader writes it."""
    chained = ChainedLog(log, audited(TOPICS))
    member = chained.member("pushjobs.leader", TOPICS.commands, "a", session_timeout_s=5)
    epoch = member.poll()
    assert epoch is not None
    fence = Fence("pushjobs.leader", epoch)
    start = {"type": "start", "job_id": JOB, "command": "deploy", "requested_by": "alice"}
    chained.append_batch(TOPICS.commands, records.start_records(JOB, start), fence=fence)
    held = {"rule": "policy.commands", "expires_ms": TS + 60_000}
    decided = {**held, "decision": "approved", "decided_by": "bob", "decided_ms": TS + 5}
    chained.append_batch(
        TOPICS.events,
        [
            event(
                "job_created", TS, command="deploy", state="new", targets=1, requested_by="alice"
            ),
            event("job_state", TS + 1, state="awaiting_approval", prev_state="new", approval=held),
        ],
        fence=fence,
    )
    chained.append_batch(
        TOPICS.commands,
        [records.decision_record(JOB, {"decision": "approved", "by": "bob"})],
        fence=fence,
    )
    node = ["web-01", "succeeded", "running", TS + 9, 0, 3, None]
    chained.append_batch(
        TOPICS.events,
        [
            event(
                "job_state",
                TS + 5,
                state="voting",
                prev_state="awaiting_approval",
                approval=decided,
            ),
            event("node_states", TS + 9, nodes=[node]),
            event("job_state", TS + 10, state="complete", prev_state="running"),
        ],
        fence=fence,
    )
    identity = files.load_private(server_key)
    signer = Ed25519Signer(key_id(identity.public.ed25519_public), identity.signing_key())
    Checkpoints(
        chained,
        TOPICS.audit,
        chained.ledger,
        signer,
        server="server",
        incarnation="a",
        every_s=60,
        clock=FakeClock(),
    ).write()
    member.close()


@pytest.fixture
def installation(tmp_path: Path) -> Installation:
    keys = tmp_path / "keys"
    keys.mkdir()
    made = {
        name: files.save(generate(name, kind), keys)
        for name, kind in (("server", "server"), ("other", "server"), ("alice", "user"))
    }
    path = tmp_path / "log.db"
    log = SqliteLog(path)
    try:
        create_standard_topics(log)
        write_job(log, path, made["server"][0])
    finally:
        log.close()
    return Installation(path, made["server"][1], made["other"][1], made["alice"][1])


def audit(*args: str | Path) -> Result:
    return CliRunner().invoke(app, ["audit", *map(str, args)], env={"COLUMNS": "200"})


def tamper(log: Path, topic: str, offset: int, old: bytes, new: bytes) -> None:
    """One record's stored bytes changed, as someone with write access to the file would."""
    with sqlite3.connect(log) as db:
        (topic_id,) = db.execute("SELECT id FROM topics WHERE name = ?", (topic,)).fetchone()
        rid = (topic_id << OFFSET_BITS) | offset
        (value,) = db.execute("SELECT value FROM records WHERE id = ?", (rid,)).fetchone()
        assert old in value
        db.execute("UPDATE records SET value = ? WHERE id = ?", (value.replace(old, new), rid))


def test_a_clean_log_verifies_with_exit_0_and_says_what_it_checked(installation):
    result = audit("verify", "--log", installation.log, "--key", installation.key)
    assert result.exit_code == Exit.OK, result.stderr
    lines = result.stdout.splitlines()
    assert f"{TOPICS.events}: 5 records, 5 chained, 5 sealed" in lines, lines
    assert f"{TOPICS.commands}: 2 records, 2 chained, 2 sealed" in lines, lines
    assert "1 signed checkpoints" in lines
    assert lines[-1] == "OK: no record altered, missing or reordered"
    assert result.stderr == ""


def test_a_record_altered_exits_1_naming_its_topic_and_offset(installation):
    tamper(installation.log, TOPICS.events, 3, b'"succeeded"', b'"failed"')  # node_states
    result = audit("verify", "--log", installation.log, "--key", installation.key)
    assert result.exit_code == Exit.FAILED
    assert result.stderr.startswith(f"TAMPERED: {TOPICS.events} offset 3: altered: "), result.stderr
    assert "OK" not in result.stdout


def test_json_names_the_first_problem_and_every_topic(installation):
    tamper(installation.log, TOPICS.events, 1, b"policy.commands", b"policy.nothing!")
    result = audit("verify", "--log", installation.log, "--key", installation.key, "--json")
    assert result.exit_code == Exit.FAILED
    report = json.loads(result.stdout)
    assert set(report) == {"ok", "checkpoints", "first", "problems", "starts", "topics"}
    assert report["ok"] is False and report["checkpoints"] == 1 and report["starts"] == []
    assert report["first"] == report["problems"][0]
    assert report["first"]["topic"] == TOPICS.events and report["first"]["offset"] == 1
    assert report["first"]["what"] == "altered" and report["first"]["detail"]
    events = report["topics"][TOPICS.events]
    assert events == {
        "records": 5,
        "chained": 5,
        "sealed": 5,
        "unsealed": 0,
        "legacy": 0,
        "outside": 0,
        "compacted_gaps": 0,
        "streams": 1,
        "deposed": 0,
    }

    clean = audit("verify", "--log", installation.log, "--key", installation.other, "--json")
    signed_by_other = json.loads(clean.stdout)
    assert clean.exit_code == Exit.FAILED
    bad = [p for p in signed_by_other["problems"] if p["what"] == "bad signature"]
    assert [p["topic"] for p in bad] == [TOPICS.audit], signed_by_other["problems"]


def test_a_missing_or_wrong_file_is_a_plain_error_not_a_traceback(installation, tmp_path):
    not_a_log = tmp_path / "notes.txt"
    not_a_log.write_text("hello\n")
    not_a_key = tmp_path / "server.pub"
    not_a_key.write_text("hello\n")
    cases = [
        (("--log", tmp_path / "gone.db", "--key", installation.key), Exit.NOT_FOUND, "no log file"),
        (("--log", not_a_log, "--key", installation.key), Exit.ERROR, "not an SQLite database"),
        (
            ("--log", installation.log, "--key", tmp_path / "gone.pub"),
            Exit.NOT_FOUND,
            "no such key",
        ),
        (("--log", installation.log, "--key", not_a_key), Exit.ERROR, "not a pushjobs key file"),
        (("--log", installation.log, "--key", installation.user), Exit.ERROR, "not the server's"),
        # A keys directory holding two server keys: which one is the auditor's to say.
        (("--log", installation.log, "--key", installation.key.parent), Exit.NOT_FOUND, "2 server"),
    ]
    for args, code, said in cases:
        result = audit("verify", *args)
        assert result.exit_code == code, (args, result.exit_code, result.stderr)
        assert result.stderr.startswith("error: ") and said in result.stderr, (args, result.stderr)
        assert isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.stdout == "", args


def test_a_log_from_before_the_trail_verifies_with_nothing_sealed(tmp_path, installation):
    # No audit topic at all (the version before the trail made none): nothing to seal.
    old = SqliteLog(tmp_path / "old.db")
    try:
        old.create_topic(TOPICS.events, policies()[TOPICS.events])
        old.append(TOPICS.events, f"job:{JOB}", orjson.dumps({"kind": "job_created"}))
    finally:
        old.close()
    result = audit("verify", "--log", tmp_path / "old.db", "--key", installation.key, "--json")
    assert result.exit_code == Exit.OK, result.stderr
    report = json.loads(result.stdout)
    assert report["checkpoints"] == 0 and report["topics"][TOPICS.events]["legacy"] == 1


def test_show_tells_who_asked_who_approved_and_what_the_node_did(installation):
    result = audit("show", JOB, "--log", installation.log)
    assert result.exit_code == Exit.OK, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"job {JOB}: deploy"
    assert lines[1].startswith("  asked by alice at 2023-11-14T22:13:20.000Z")
    assert "  state complete" in lines
    approved = [line for line in lines if " approved by bob" in line]
    assert len(approved) == 1, lines
    assert lines[-1] == "  node web-01: succeeded exit 0"

    as_json = json.loads(audit("show", JOB, "--log", installation.log, "--json").stdout)
    assert as_json["requested_by"] == "alice" and as_json["state"] == "complete"
    assert [(s["what"], s["by"]) for s in as_json["steps"] if s["by"]] == [
        ("created", "alice"),
        ("approved", "bob"),
    ]
    assert as_json["nodes"]["web-01"][-1]["exit_status"] == 0


def test_show_of_an_unknown_job_exits_not_found_and_says_so(installation):
    result = audit("show", "nosuchjob", "--log", installation.log)
    assert result.exit_code == Exit.NOT_FOUND
    assert result.stderr == "no record of job nosuchjob in the log\n"
    assert result.stdout == ""
    gone = audit("show", JOB, "--log", installation.log.with_name("gone.db"))
    assert gone.exit_code == Exit.NOT_FOUND and "no log file" in gone.stderr
