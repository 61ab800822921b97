"""Logging of the daemons: level, destination and format, and reopening for logrotate.

``pushjobs-server`` and ``pushjobs-agent`` take ``--log-level``, ``--log-file`` and
``--log-format text|json``. Text lines read ``2026-11-23T23:30:01.123+00:00 INFO
pushjobs-server: message``; JSON lines carry ``ts`` (ISO-8601 with the UTC offset),
``level``, ``logger``, ``msg`` and, for an exception, ``exc``. Without ``--log-file`` they
go to stderr (the journal, under systemd, adds its own time).

A log file is opened for appending; ``reopen()`` (on SIGHUP) closes it and opens the
path again, so after ``mv pushjobs.log pushjobs.log.1`` the next line goes to a new
file: logrotate without ``copytruncate``. A file that cannot be opened at start is a
``ConfigError``; one that cannot be reopened keeps the old handle and says so on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

import orjson

from pushjobs.errors import ConfigError

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


def iso_time(created: float) -> str:
    """``created`` (epoch seconds) as local ISO-8601 with milliseconds and the UTC offset."""
    return datetime.fromtimestamp(created).astimezone().isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    def __init__(self, program: str) -> None:
        super().__init__()
        self.program = program

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{iso_time(record.created)} {record.levelname} {self.program}: {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class ReopenableFileHandler(logging.StreamHandler[TextIO]):
    """Appends to ``path``; after ``request_reopen()`` the next record starts on whatever
    file is at ``path`` by then.

    The request only sets a flag, so a signal handler may make it: the swap happens in
    ``emit``, outside any other write to the old file. A record a signal handler logs
    while another is being written waits for it to end (never interleaved with it), then
    goes out after the swap.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.reopen_requested = False
        self._depth = 0
        self._deferred: list[logging.LogRecord] = []
        super().__init__(self._open())

    def _open(self) -> TextIO:
        try:
            return self.path.open("a", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise ConfigError(
                f"cannot open the log file: {exc.strerror}", path=str(self.path)
            ) from None

    def request_reopen(self) -> None:
        self.reopen_requested = True

    def emit(self, record: logging.LogRecord) -> None:
        self.acquire()
        self._depth += 1
        try:
            if self._depth > 1:
                # Logged by a signal handler in the middle of another record (the SIGHUP
                # handler's "reopened"): written after it, on the file the reopen opens.
                self._deferred.append(record)
                return
            self._write(record)
            while self._deferred:
                self._write(self._deferred.pop(0))
        finally:
            self._depth -= 1
            self.release()

    def _write(self, record: logging.LogRecord) -> None:
        if self.reopen_requested:
            self.reopen_requested = False
            self._swap()
        super().emit(record)

    def _swap(self) -> None:
        try:
            stream = self._open()
        except ConfigError as exc:
            sys.stderr.write(f"{exc}; still writing to the old file\n")
            return
        old, self.stream = self.stream, stream
        old.close()

    def close(self) -> None:
        self.acquire()
        try:
            self.stream.close()
        finally:
            self.release()
        super().close()


@dataclass
class LogSetup:
    """What ``configure`` installed: reopen its file on SIGHUP."""

    handler: logging.Handler

    def reopen(self) -> str:
        """Ask for the log file to be reopened (safe in a signal handler); what to log."""
        if isinstance(self.handler, ReopenableFileHandler):
            self.handler.request_reopen()
            return f"log file {self.handler.path} reopened"
        return "no log file to reopen"


def configure(
    program: str, *, level: str = "info", path: Path | None = None, fmt: str = "text"
) -> LogSetup:
    """Send the root logger's records to ``path`` (else stderr) at ``level`` in ``fmt``."""
    if level not in LEVELS:
        raise ConfigError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt not in FORMATS:
        raise ConfigError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler: logging.Handler = (
        ReopenableFileHandler(path) if path is not None else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(program))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    return LogSetup(handler)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The logging options every daemon takes."""
    parser.add_argument(
        "--log-level",
        choices=LEVELS,
        default=None,
        help="least severe level logged (default: info)",
    )
    parser.add_argument(
        "--log-file",
        type=Path,
        default=None,
        help="append to this file, reopened on SIGHUP (default: stderr)",
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text lines, or JSON lines with ts, level, logger, msg (default: text)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="the same as --log-level debug"
    )


def from_arguments(program: str, args: argparse.Namespace) -> LogSetup:
    level = args.log_level or ("debug" if args.verbose else "info")
    return configure(program, level=level, path=args.log_file, fmt=args.log_format)
