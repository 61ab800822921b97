"""Rendering for the CLI: ``--json`` for scripts, aligned tables for people, errors to stderr."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import orjson
import typer

from pushjobs.cli.exitcodes import for_error
from pushjobs.errors import PushJobsError

P = ParamSpec("P")
R = TypeVar("R")


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain aligned text table; ``columns`` are the keys shown, headers upper-cased."""
    cells = [[col.upper() for col in columns]]
    cells += [["" if row.get(c) is None else str(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in cells
    ]
    return "\n".join(lines)


def error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a ``PushJobsError`` into one line on stderr and its exit code, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except PushJobsError as exc:
            error(str(exc))
            raise typer.Exit(int(for_error(exc))) from None

    return wrapper
