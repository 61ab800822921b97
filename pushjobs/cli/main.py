"""Entry point of the ``pushjobs`` command."""

from __future__ import annotations

import typer

from pushjobs import __version__
from pushjobs.cli import job, key, log, node, simulate
from pushjobs.cli.archive import archive
from pushjobs.cli.quickstart import quickstart
from pushjobs.cli.report import report

app = typer.Typer(
    name="pushjobs",
    help="Push jobs to a fleet and track every node to the end.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(key.app, name="key")
app.add_typer(log.app, name="log")
app.add_typer(job.app, name="job")
app.add_typer(node.app, name="node")
app.add_typer(simulate.app, name="simulate")
app.command("quickstart")(quickstart)
app.command("archive")(archive)
app.command("report")(report)


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
