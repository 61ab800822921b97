"""Exit codes of the ``pushjobs`` CLI and the daemons: one table, stable for scripts.

``CODES`` is the table: every code with its name and one line of meaning. The table in
docs/operating.md, every command's ``--help`` epilogue (``epilog``) and ``for_error`` come
from it, and ``tests/cli/test_exitcodes.py`` checks that page against it. ``pushjobs-server`` and
``pushjobs-agent`` use the same numbers where they mean the same thing: 0 a clean stop,
2 bad arguments, 9 bad configuration (systemd is told not to restart on 9), 1 anything
else that stopped them.
"""

from __future__ import annotations

from enum import IntEnum

from pushjobs import errors
from pushjobs.api import methods


class Exit(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    QUORUM_FAILED = 3
    TIMED_OUT = 4
    ABORTED = 5
    UNREACHABLE = 6
    UNAUTHORIZED = 7
    NOT_FOUND = 8
    CONFIG = 9
    ERROR = 10
    AWAITING_APPROVAL = 11
    REJECTED = 12


CODES: dict[Exit, str] = {
    Exit.OK: "success: every targeted node succeeded",
    Exit.FAILED: (
        "it ran and part of it failed (a node failed, crashed or was unavailable; "
        "a batch job halted)"
    ),
    Exit.USAGE: "bad arguments, or a request the server refused as malformed",
    Exit.QUORUM_FAILED: "too few nodes accepted the job to meet its quorum",
    Exit.TIMED_OUT: "the job ran past its run timeout",
    Exit.ABORTED: "the job was aborted",
    Exit.UNREACHABLE: "no answer from the server, or no server leading",
    Exit.UNAUTHORIZED: "the user's key or role does not allow it",
    Exit.NOT_FOUND: "no such job, node, key, topic or input; a selector matching no node",
    Exit.CONFIG: "configuration: a missing or invalid config file, setting or endpoint",
    Exit.ERROR: "any other error",
    Exit.AWAITING_APPROVAL: (
        "held by the server's policy until another admin approves it (job approve)"
    ),
    Exit.REJECTED: "an admin rejected the job, or its approval expired: no node ran it",
}
"""Every exit code and what it means, in order."""


def epilog() -> str:
    """The exit-code table as the end of a command's ``--help``."""
    width = max(len(code.name) for code in CODES)
    rows = [f"{int(code):>2}  {code.name.lower():<{width}}  {text}" for code, text in CODES.items()]
    # \b keeps click from rewrapping the block into one paragraph.
    return "Exit codes:\n\n\b\n" + "\n".join(rows)


def markdown_table() -> str:
    """The table as docs/operating.md shows it."""
    lines = ["| code | name | meaning |", "|---|---|---|"]
    lines += [f"| {int(c)} | `{c.name.lower()}` | {text} |" for c, text in CODES.items()]
    return "\n".join(lines)


_BY_API_CODE = {
    methods.BAD_REQUEST: Exit.USAGE,
    methods.NOT_FOUND: Exit.NOT_FOUND,
    methods.UNAUTHORIZED: Exit.UNAUTHORIZED,
    methods.NOT_LEADER: Exit.UNREACHABLE,
}


def for_error(exc: errors.PushJobsError) -> Exit:
    """The exit code an error ends the CLI with."""
    table: tuple[tuple[type[errors.PushJobsError], Exit], ...] = (
        (errors.ConfigError, Exit.CONFIG),
        (errors.MissingKeyFile, Exit.NOT_FOUND),
        (errors.KeyRequestError, Exit.USAGE),
        (errors.NoLogFile, Exit.NOT_FOUND),
        (errors.Unreachable, Exit.UNREACHABLE),
        (errors.TransportError, Exit.CONFIG),  # a socket refused its endpoint (--server)
        (errors.Unauthorized, Exit.UNAUTHORIZED),
        (errors.NotFound, Exit.NOT_FOUND),
        (errors.UnknownIdentity, Exit.NOT_FOUND),
        (errors.UnknownTopic, Exit.NOT_FOUND),
        (errors.MissingExtra, Exit.CONFIG),
    )
    for cls, code in table:
        if isinstance(exc, cls):
            return code
    if isinstance(exc, errors.ApiError):
        return _BY_API_CODE.get(exc.code, Exit.ERROR)
    return Exit.ERROR
