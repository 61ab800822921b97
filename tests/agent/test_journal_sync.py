"""What the agent's journal fsyncs: the job id before its ack, nothing else.

A power loss cannot be staged here, so the statements SQLite runs are traced: the job id's
insert runs under ``synchronous=FULL`` (its commit fsyncs the write-ahead log), every
other write under ``NORMAL`` (no fsync: it survives ``kill -9``, not a power loss).
"""

from __future__ import annotations

from pathlib import Path

from agent.journal import Journal


def traced(journal: Journal) -> list[str]:
    statements: list[str] = []
    assert journal._db is not None
    journal._db.set_trace_callback(statements.append)
    return statements


def sync_of(statements: list[str], write: str) -> str:
    """The synchronous level in force when ``write`` ran."""
    level = "NORMAL"  # the journal's opening level, asserted below
    for statement in statements:
        if statement.startswith("PRAGMA synchronous="):
            level = statement.split("=", 1)[1]
        elif statement.startswith(write):
            return level
    raise AssertionError(f"{write} never ran: {statements}")


def test_only_the_job_id_is_synced(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    try:
        assert journal._db is not None
        assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        statements = traced(journal)
        journal.remember("j1", 1)
        journal.running("j1", 4242, 7)
        journal.store_outcome("j1", "succeeded", b"{}", 2)
        journal.ended("j1")
        assert sync_of(statements, "INSERT OR IGNORE INTO seen") == "FULL"
        assert sync_of(statements, "INSERT OR REPLACE INTO running") == "NORMAL"
        assert sync_of(statements, "INSERT OR REPLACE INTO outcomes") == "NORMAL"
        assert sync_of(statements, "DELETE FROM running") == "NORMAL"
        assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        journal.close()
    reopened = Journal(tmp_path / "journal.db")  # and all of it is there after a restart
    try:
        assert reopened.seen("j1")
        assert reopened.outcome("j1") == ("succeeded", b"{}")
        assert reopened.still_running() == []
    finally:
        reopened.close()
