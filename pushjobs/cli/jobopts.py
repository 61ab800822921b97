"""The options a job takes, shared by ``job start`` and ``schedule add``: one definition and
one help text for both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CommandArg = Annotated[str, typer.Argument(help="A command name the agents whitelist.")]

NodesArg = Annotated[
    list[str],
    typer.Argument(metavar="NODE...", help="Names, globs (web-*), or queries (os=linux,tag=web)."),
]

QuorumOpt = Annotated[
    str,
    typer.Option("--quorum", help="Nodes that must be ready: a count (3) or a percent (75%)."),
]

TimeoutOpt = Annotated[
    float | None, typer.Option("--timeout", help="Run timeout, seconds.", show_default=False)
]

VoteTimeoutOpt = Annotated[
    float | None,
    typer.Option("--vote-timeout", help="Seconds nodes have to accept.", show_default=False),
]

CaptureOpt = Annotated[
    bool,
    typer.Option(
        "--capture", help="Keep stdout/stderr of every node (failures always keep theirs)."
    ),
]

EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", help="NAME=VALUE for the command; repeatable.", show_default=False),
]

SecretEnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret-env",
        help="NAME=VALUE (or NAME: its value here) set like --env but kept secret: "
        "sealed on the server, never shown; repeatable.",
        show_default=False,
    ),
]

EnvFileOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--env-file",
        help="A file of NAME=VALUE lines, every one sent as --secret-env; repeatable.",
        show_default=False,
    ),
]

CwdOpt = Annotated[
    str | None,
    typer.Option("--cwd", help="Working directory on the nodes.", show_default=False),
]

BatchOpt = Annotated[
    str | None,
    typer.Option(
        "--batch",
        help="Run on at most N nodes (or P% of the targets) at a time, starting the next "
        "as soon as one finishes; --timeout then bounds each node's run.",
        show_default=False,
    ),
]

BatchWaitOpt = Annotated[
    float | None,
    typer.Option("--batch-wait", help="With --batch: seconds between starts.", show_default=False),
]

MaxFailuresOpt = Annotated[
    str | None,
    typer.Option(
        "--max-failures",
        help="With --batch: after N (or P%) nodes failed, crashed or timed out, start no "
        "more; the job ends halted.",
        show_default=False,
    ),
]

HaltIfOpt = Annotated[
    str | None,
    typer.Option(
        "--halt-if",
        metavar="CMD",
        help="With --batch: a health check the server runs on its host before each batch "
        "and every --halt-check-every while nodes wait; when it fails (non-zero exit, or "
        "its timeout) no node starts any more and the job ends halted. Only a command the "
        "server's \\[halt] checks lists, exactly as written there.",
        show_default=False,
    ),
]

HaltIfAlertOpt = Annotated[
    str | None,
    typer.Option(
        "--halt-if-alert",
        metavar="NAME",
        help="With --batch: halt as --halt-if does while the Prometheus alert NAME fires "
        "(the server's \\[halt] prometheus_url; Prometheus unreachable halts too).",
        show_default=False,
    ),
]

HaltCheckEveryOpt = Annotated[
    str | None,
    typer.Option(
        "--halt-check-every",
        metavar="DURATION",
        help="How often the health signal is checked while nodes wait (default 30s; at least 1s).",
        show_default=False,
    ),
]

HaltCheckTimeoutOpt = Annotated[
    str | None,
    typer.Option(
        "--halt-check-timeout",
        metavar="DURATION",
        help="How long one check may take before it counts as failed (default 10s).",
        show_default=False,
    ),
]

OfflineWaitOpt = Annotated[
    str | None,
    typer.Option(
        "--offline-wait",
        metavar="DURATION",
        help="Keep the job open this long (90s, 30m, 2h, 1d) for nodes offline at start: "
        "each gets the job when it comes back, and runs it once; the rest end unavailable. "
        "The quorum counts the nodes online at start. Without it an offline node is "
        "unavailable at once.",
        show_default=False,
    ),
]
BusyWaitOpt = Annotated[
    str | None,
    typer.Option(
        "--busy-wait",
        metavar="DURATION",
        help="Wait up to this long (90, 90s, 15m, 1h30m) for nodes busy with another job "
        "before asking them to commit; a node still busy then refuses, saying so. Without "
        "it a busy node refuses at once (a schedule's fire waits 5m).",
        show_default=False,
    ),
]
