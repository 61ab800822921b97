"""``pushjobs systemd install``: the daemons' systemd units, written where systemd reads them.

The units ship as package data (``pushjobs/systemd/*.service``); ``@BINDIR@`` in them
becomes the directory holding ``pushjobs-server`` and ``pushjobs-agent`` (this
installation's, by default), so a virtualenv install works as well as a system one.

Writing them, it says what would stop a unit from starting that it can see from here
(``problems``): programs where the server unit's ``ProtectHome=yes`` hides them, a unit
user that does not exist, and a server key its user cannot read. They are warnings: the
units are written all the same (a package build stages them for another machine).
"""

from __future__ import annotations

import contextlib
import pwd
import shutil
import stat
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from pushjobs.cli.render import handle_errors
from pushjobs.errors import ConfigError

UNITS = ("pushjobs-server.service", "pushjobs-agent.service", "pushjobs-edge.service")
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


# ProtectHome=yes makes these empty for the service (systemd.exec(5)).
HIDDEN_BY_PROTECT_HOME = (Path("/home"), Path("/root"), Path("/run/user"))


def _unit_setting(text: str, key: str) -> str | None:
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None


def _server_key(prefix: Path) -> Path:
    """The key the server unit's config names (``[server] key_file``), else the default."""
    config = prefix / "etc/pushjobs/server.toml"
    default = prefix / "etc/pushjobs/keys/server.key"
    try:
        with config.open("rb") as fh:
            section = tomllib.load(fh).get("server", {})
    except (OSError, tomllib.TOMLDecodeError):
        return default
    named = section.get("key_file") if isinstance(section, dict) else None
    return prefix / Path(named).expanduser().relative_to("/") if named else default


def problems(name: str, text: str, bindir: Path, prefix: Path) -> list[str]:
    """What would keep unit ``name`` (its ``text``) from starting, as far as this machine
    shows: a warning each, saying the fix."""
    found = []
    if _unit_setting(text, "ProtectHome") == "yes" and any(
        bindir.is_relative_to(home) for home in HIDDEN_BY_PROTECT_HOME
    ):
        found.append(
            f"{name}: {bindir} is hidden from the service by its ProtectHome=yes: install "
            "pushjobs outside /home and /root (python3 -m venv /opt/pushjobs && "
            "/opt/pushjobs/bin/pip install .) and install the units from there"
        )
    user = _unit_setting(text, "User") or "root"
    if user == "root":
        return found
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        found.append(f"{name}: its user {user!r} does not exist: useradd --system {user}")
        return found
    if name == "pushjobs-server.service":
        key = _server_key(prefix)
        with contextlib.suppress(OSError):
            mode = key.stat()
            if mode.st_uid != uid and not mode.st_mode & stat.S_IROTH:
                found.append(
                    f"{name}: {user!r} cannot read the server key {key} "
                    f"(owned by uid {mode.st_uid}, mode {stat.S_IMODE(mode.st_mode):04o}): "
                    f"chown {user}: {key}"
                )
    return found


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
            help="Directory of pushjobs-server, -agent and -edge (default: this install's).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the units and where they would go.")
    ] = False,
) -> None:
    """Write pushjobs-server.service, pushjobs-agent.service and pushjobs-edge.service to
    PREFIX/etc/systemd/system.

    Then: systemctl daemon-reload && systemctl enable --now pushjobs-agent (or -server, or
    -edge for an edge of its own).
    Example: pushjobs systemd install --dry-run
    """
    programs = (bindir or default_bindir()).resolve()
    target = prefix / UNIT_DIR
    for name in UNITS:
        text = unit_text(name, programs)
        for problem in problems(name, text, programs, prefix):
            typer.echo(f"warning: {problem}", err=True)
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
