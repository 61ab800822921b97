"""Exit codes of the ``pushjobs`` CLI, stable for scripts."""

from __future__ import annotations

from enum import IntEnum

from pushjobs import errors


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the operation ran and something in it failed (e.g. a node failed)
    USAGE = 2  # bad arguments; the same code click uses for usage errors
    QUORUM_FAILED = 3
    TIMED_OUT = 4
    ABORTED = 5
    UNREACHABLE = 6
    UNAUTHORIZED = 7
    NOT_FOUND = 8
    CONFIG = 9
    ERROR = 10  # any other pushjobs error


def for_error(exc: errors.PushJobsError) -> Exit:
    """The exit code an error ends the CLI with."""
    table: tuple[tuple[type[errors.PushJobsError], Exit], ...] = (
        (errors.ConfigError, Exit.CONFIG),
        (errors.Unreachable, Exit.UNREACHABLE),
        (errors.Unauthorized, Exit.UNAUTHORIZED),
        (errors.NotFound, Exit.NOT_FOUND),
        (errors.UnknownIdentity, Exit.NOT_FOUND),
        (errors.UnknownTopic, Exit.NOT_FOUND),
        (errors.MissingExtra, Exit.CONFIG),
    )
    for cls, code in table:
        if isinstance(exc, cls):
            return code
    return Exit.ERROR
