"""Entry point of the ``pushjobs`` command.

Conventions a Salt or knife user expects: ``-h`` as well as ``--help`` on every command,
shell completion (``pushjobs --install-completion``), and every command's help ending
with the one table of exit codes (``exitcodes.CODES``).
"""

from __future__ import annotations

from typing import Any

import typer
import typer.core

from pushjobs import __version__
from pushjobs.cli import audit_commands as audit
from pushjobs.cli import job_commands as job
from pushjobs.cli import key_commands as key
from pushjobs.cli import log_commands as log
from pushjobs.cli import node_commands as node
from pushjobs.cli import schedule_commands as schedule
from pushjobs.cli import server_commands as server
from pushjobs.cli import simulate_commands as simulate
from pushjobs.cli import systemd_commands as systemd
from pushjobs.cli.archive_commands import archive
from pushjobs.cli.exitcodes import epilog
from pushjobs.cli.quickstart import quickstart
from pushjobs.cli.report_commands import report

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="pushjobs",
    help="Push jobs to a fleet and track every node to the end.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)
app.add_typer(key.app, name="key")
app.add_typer(log.app, name="log")
app.add_typer(audit.app, name="audit")
app.add_typer(job.app, name="job")
app.add_typer(node.app, name="node")
app.add_typer(schedule.app, name="schedule")
app.add_typer(server.app, name="server")
app.add_typer(simulate.app, name="simulate")
app.add_typer(systemd.app, name="systemd")
app.command("quickstart")(quickstart)
app.command("archive")(archive)
app.command("report")(report)


def _with_exit_codes(group: typer.Typer) -> None:
    """Every command and group of ``group`` ends its help with the exit-code table."""
    text = epilog()
    for command in group.registered_commands:
        command.epilog = command.epilog or text
    for sub in group.registered_groups:
        sub.epilog = sub.epilog or text
        if sub.typer_instance is not None:
            sub.typer_instance.info.epilog = sub.typer_instance.info.epilog or text
            _with_exit_codes(sub.typer_instance)


def _option_type(self: Any, ctx: Any) -> str | None:
    # Recent typer shows each parameter's Python type (<bool>, <str>, <list[str]>) in the
    # help; a flag needs none and a value reads better named, as argparse does (--timeout
    # TIMEOUT).
    if self.is_flag or self.count:
        return ""
    return str(self.metavar or (self.name or "value").upper())


def _argument_type(self: Any, ctx: Any) -> str | None:
    return None  # the argument's own name says it


def _plain_help() -> None:
    for cls, method in (
        (typer.core.TyperOption, _option_type),
        (typer.core.TyperArgument, _argument_type),
    ):
        if hasattr(cls, "display_type_rich"):
            cls.display_type_rich = method  # type: ignore[method-assign]


_with_exit_codes(app)
app.info.epilog = epilog()
_plain_help()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pushjobs {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Push jobs to a fleet and track every node to the end."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
