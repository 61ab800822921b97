"""docs/audit.md, run as written, then the log it checked tampered with in each way.

The recipe runs on the fleet of docs/fleet.md (``set_up_fleet``): a real server writing a
real SQLite log, a real agent running the job. Then the server is stopped (it signs a
last checkpoint as it goes) and copies of its log file are altered as an attacker with
write access to the file would: a byte changed, a record removed, two records swapped,
the checkpoints read with another server's key. ``pushjobs audit verify`` must name the
spot of each, from the file alone.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from pushjobs.log.sqlite.sqlite_file import OFFSET_BITS
from pushjobs.testbed.childproc import stop_all
from tests.e2e.doc_recipes import DOCS, Walkthrough, blocks, set_up_fleet

PAGE = DOCS / "audit.md"
CHECK = "## Checking the log"
EVENTS = "pushjobs.events"


def verify(walk: Walkthrough, log: Path, key: str = "/etc/pushjobs/keys/server.pub") -> dict:
    result = walk.bash(walk.apply(f"pushjobs audit verify --log {log} --key {key} --json"))
    report = json.loads(result.stdout)
    assert result.returncode == (0 if report["ok"] else 1), result.stderr
    return report


def tampered(log: Path, name: str, sql: str, *args: object) -> Path:
    """A copy of ``log`` with ``sql`` run on it (``{base}``: the events topic's first
    record id, offset 0)."""
    copy = log.with_name(f"{name}.db")
    with sqlite3.connect(log) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
        (topic_id,) = dst.execute("SELECT id FROM topics WHERE name = ?", (EVENTS,)).fetchone()
        base = topic_id << OFFSET_BITS
        dst.execute(sql.format(base=base), args)
    return copy


def test_the_audit_recipe_verifies_a_real_run_and_names_every_tampering(walk: Walkthrough):
    set_up_fleet(walk)
    found = blocks(PAGE, CHECK)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    walk.block(*found[0])
    assert "OK: no record altered" in walk.output("pushjobs audit verify")
    job = walk.env["JOB"]
    story = walk.output("pushjobs audit show")
    assert f"job {job}: uptime" in story and "asked by alice" in story, story
    assert "node web-01: " in story and "succeeded" in story, story

    stop_all([walk.daemon("pushjobs-server")], 10.0)  # a clean stop: a last checkpoint
    log = walk.path("/var/lib/pushjobs/log.db")
    clean = verify(walk, log)
    assert clean["ok"] and clean["checkpoints"] >= 1, clean
    events = clean["topics"][EVENTS]
    assert events["chained"] >= 4 and events["unsealed"] == 0, events

    with sqlite3.connect(log) as db:
        (topic_id,) = db.execute("SELECT id FROM topics WHERE name = ?", (EVENTS,)).fetchone()
        rows = db.execute(
            "SELECT id FROM records WHERE id >> ? = ?"
            " AND CAST(value AS TEXT) LIKE '{\"_chain\"%' ORDER BY id",
            (OFFSET_BITS, topic_id),
        ).fetchall()
    mask, base = (1 << OFFSET_BITS) - 1, topic_id << OFFSET_BITS
    middle = [rid & mask for (rid,) in rows][1:-1]
    assert len(middle) >= 2, rows
    at, after = middle[0], middle[1]

    def first(copy: Path, key: str = "/etc/pushjobs/keys/server.pub") -> tuple[str, int, str]:
        report = verify(walk, copy, key)
        assert not report["ok"], "tampering went unnoticed"
        spot = report["first"]
        return spot["topic"], spot["offset"], spot["what"]

    byte = tampered(
        log,
        "byte",
        "UPDATE records SET value = CAST(replace(CAST(value AS TEXT), "
        "'\"server\"', '\"servex\"') AS BLOB) WHERE id = {base} + ?",
        at,
    )
    assert first(byte) == (EVENTS, at, "altered")
    removed = tampered(log, "removed", "DELETE FROM records WHERE id = {base} + ?", at)
    assert first(removed) == (EVENTS, after, "missing")
    with sqlite3.connect(log) as db:
        values = [
            db.execute("SELECT value FROM records WHERE id = ?", (base + o,)).fetchone()[0]
            for o in (after, at)
        ]
    swapped = tampered(
        log, "swapped", "UPDATE records SET value = ? WHERE id = {base} + ?", values[0], at
    )
    with sqlite3.connect(swapped) as db:
        db.execute("UPDATE records SET value = ? WHERE id = ?", (values[1], base + after))
    assert first(swapped) == (EVENTS, at, "reordered")

    walk.run("pushjobs key gen other --kind server --dir /etc/pushjobs/keys")
    assert first(log, "/etc/pushjobs/keys/other.pub")[2] == "bad signature"
