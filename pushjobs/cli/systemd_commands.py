"""``pushjobs systemd install``: the daemons' systemd units, written where systemd reads them.

The units ship as package data (``pushjobs/systemd/*.service``); ``@BINDIR@`` in them
becomes the directory holding ``pushjobs-server`` and ``pushjobs-agent`` (this
installation's, by default), so a virtualenv install works as well as a system one.
"""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from pushjobs.cli.render import handle_errors
from pushjobs.errors import ConfigError

UNITS = ("pushjobs-server.service", "pushjobs-agent.service")
UNIT_DIR = Path("etc/systemd/system")

app = typer.Typer(
    help="systemd units for pushjobs-server and pushjobs-agent.", no_args_is_help=True
)


def unit_text(name: str, bindir: Path) -> str:
    """The unit ``name`` with its programs in ``bindir``. Pure but for reading package data."""
    template = resources.files("pushjobs.systemd").joinpath(name).read_text(encoding="utf-8")
    return template.replace("@BINDIR@", str(bindir))


def default_bindir() -> Path:
    """Where this installation's console scripts are: beside the running Python, else PATH."""
    beside = Path(sys.executable).parent
    if (beside / "pushjobs-server").exists():
        return beside
    found = shutil.which("pushjobs-server")
    return Path(found).parent if found else beside


@app.command("install")
@handle_errors
def install(
    prefix: Annotated[
        Path,
        typer.Option("--prefix", help="Root to write under (a package build's staging dir)."),
    ] = Path("/"),
    bindir: Annotated[
        Path | None,
        typer.Option(
            "--bindir",
            help="Directory of pushjobs-server and pushjobs-agent (default: this install's).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the units and where they would go.")
    ] = False,
) -> None:
    """Write pushjobs-server.service and pushjobs-agent.service to PREFIX/etc/systemd/system.

    Then: systemctl daemon-reload && systemctl enable --now pushjobs-agent (or -server).
    Example: pushjobs systemd install --dry-run
    """
    programs = (bindir or default_bindir()).resolve()
    target = prefix / UNIT_DIR
    for name in UNITS:
        text = unit_text(name, programs)
        path = target / name
        if dry_run:
            typer.echo(f"# {path}\n{text}")
            continue
        try:
            target.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write the unit: {exc.strerror}", path=str(path)) from None
        typer.echo(f"wrote {path}")
    if not dry_run:
        typer.echo("next: systemctl daemon-reload && systemctl enable --now pushjobs-agent")
