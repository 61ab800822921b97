"""The daemons' log file (pushjobs/logsetup.py): reopened on SIGHUP, as logrotate expects."""

from __future__ import annotations

import logging
from pathlib import Path

from pushjobs.logsetup import ReopenableFileHandler


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("t", logging.INFO, __file__, 1, message, None, None)


def test_a_reopen_asked_between_records_starts_the_next_one_on_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "d.log"
    handler = ReopenableFileHandler(path)
    try:
        handler.emit(record("before"))
        path.rename(tmp_path / "d.log.1")  # what logrotate does
        handler.request_reopen()
        handler.emit(record("after"))
    finally:
        handler.close()
    assert (tmp_path / "d.log.1").read_text() == "before\n"
    assert path.read_text() == "after\n"


class Interrupting(logging.Formatter):
    """Formats a record as a SIGHUP landing mid-write would: the signal handler asks for
    the reopen and logs that it did, through the same handler, before this record is out."""

    def __init__(self, handler: ReopenableFileHandler, rotated: Path) -> None:
        super().__init__()
        self.handler, self.rotated, self.fired = handler, rotated, False

    def format(self, record: logging.LogRecord) -> str:
        if not self.fired:
            self.fired = True
            self.handler.path.rename(self.rotated)
            self.handler.request_reopen()
            self.handler.emit(logging.LogRecord("t", logging.INFO, "", 1, "reopened", None, None))
        return record.getMessage()


def test_a_reopen_asked_in_the_middle_of_a_record_lands_on_the_new_file(tmp_path: Path) -> None:
    # The server's SIGHUP handler logs "... reopened" at once; a signal that arrives while
    # the server writes a record used to put that line in the rotated file and leave the
    # new one missing until some later record, on an idle server possibly never.
    path, rotated = tmp_path / "d.log", tmp_path / "d.log.1"
    handler = ReopenableFileHandler(path)
    handler.setFormatter(Interrupting(handler, rotated))
    try:
        handler.emit(record("busy"))
    finally:
        handler.close()
    assert rotated.read_text() == "busy\n"
    assert path.read_text() == "reopened\n"
