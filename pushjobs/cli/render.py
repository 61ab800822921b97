"""Rendering for the CLI: ``--json`` for scripts, aligned tables for people, errors to stderr.

Free text a table or a job view shows (a command, a reason, a node's name, tags and facts)
comes from other people: whoever started the job, whoever configured an agent. It is shown
through ``printable``, so a newline or a terminal escape in it cannot forge a row of its
own or repaint the screen. ``--json`` prints it exactly: JSON escapes it by itself.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import orjson
import typer

from pushjobs.cli.exitcodes import Exit, for_error
from pushjobs.errors import ApiError, PushJobsError

P = ParamSpec("P")
R = TypeVar("R")

# C0 and C1 controls and DEL; line and paragraph separators; bidi embeddings, overrides and
# isolates (they reorder what follows them on the line); lone surrogates (not printable).
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def printable(text: str) -> str:
    """``text`` with every control character written out (a newline as the two characters
    backslash-n, others as ``\\xNN`` or ``\\uNNNN``): one line, shown as it is. Pure."""
    return _UNPRINTABLE.sub(_escape, text)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table; ``columns`` are the keys shown, headers upper-cased."""
    cells = [[col.upper() for col in columns]]
    cells += [
        ["" if row.get(c) is None else printable(str(row.get(c))) for c in columns] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in cells
    ]
    return "\n".join(lines)


def error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)


UNEXPECTED_REPLY = "unexpected reply from the server (another version?)"
DETAIL_CHARS = 200


@contextlib.contextmanager
def reading_reply() -> Iterator[None]:
    """Around the code that takes a server's reply apart and shows it: a reply of another
    shape (a server of another version, or a broken one) ends the command with one line and
    exit code 10, not a traceback.

    Only around that code: the errors caught here (a missing key, a wrong type or value)
    are what a reply of the wrong shape raises, and would hide a genuine bug anywhere else.
    """
    try:
        yield
    except (LookupError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        detail = printable(f"{type(exc).__name__}: {exc}")[:DETAIL_CHARS]
        error(f"{UNEXPECTED_REPLY}: {detail}")
        raise typer.Exit(int(Exit.ERROR)) from None


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a ``PushJobsError`` into one line on stderr and its exit code, never a traceback.

    A reply of an unexpected shape is turned into one line by ``reading_reply``, used by
    the commands around the code that renders replies: here it would take any bug in a
    command for the server's fault."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except PushJobsError as exc:
            # A server's refusal may echo what someone else sent (a job's command): one
            # line, escaped. Our own messages may span lines on purpose (a sample config).
            error(printable(str(exc)) if isinstance(exc, ApiError) else str(exc))
            raise typer.Exit(int(for_error(exc))) from None

    return wrapper
