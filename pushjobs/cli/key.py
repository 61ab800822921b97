"""``pushjobs key``: generate identity keys and manage the key registry, as salt-key does.

These commands work on the registry file directly, so they work while the server is
down; a running server sees the changes at once (see ``keys.store``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from keys import files
from keys.entry import Entry
from keys.identity import generate
from keys.registry import KeyRegistry
from keys.states import KeyState
from pushjobs import paths
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import error, handle_errors, print_json, table
from pushjobs.errors import PushJobsError

app = typer.Typer(
    help="Identity keys and the key registry (pending / accepted / rejected / denied).",
    no_args_is_help=True,
)

KindName = Literal["node", "user", "server"]
RoleName = Literal["admin", "writer", "reader"]
StateName = Literal["pending", "accepted", "rejected", "denied"]

# Help texts use parentheses: rich would take square brackets for markup and drop them.
RegistryOpt = Annotated[
    Path | None,
    typer.Option(
        "--registry",
        help="The key registry file (default: $PUSHJOBS_KEY_REGISTRY, "
        "else $PUSHJOBS_HOME/registry.json).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
COLUMNS = ("name", "kind", "role", "state", "fingerprint")


def _registry(path: Path | None) -> KeyRegistry:
    return KeyRegistry(path or paths.registry_path())


@app.command("gen")
@handle_errors
def gen(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Node, user or server name.", show_default=False)
    ],
    kind: Annotated[KindName, typer.Option("--kind", help="What the key is for.")] = "node",
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where to write NAME.key and NAME.pub (default: $PUSHJOBS_HOME/keys).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing key files.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Generate an identity: NAME.key (private, mode 0600) and NAME.pub (to share).

    Example: pushjobs key gen web-01 --kind node --dir /etc/pushjobs/keys
    """
    identity = generate(name, kind)
    key_path, pub_path = files.save(identity, directory or paths.keys_dir(), force=force)
    result = {
        "name": name,
        "kind": kind,
        "private": str(key_path),
        "public": str(pub_path),
        "fingerprint": identity.public.fingerprint,
    }
    if as_json:
        print_json(result)
    else:
        typer.echo(f"wrote {key_path} (private, mode 0600) and {pub_path}")
        typer.echo(f"fingerprint {identity.public.fingerprint}")


@app.command("add")
@handle_errors
def add(
    pubfiles: Annotated[
        list[Path], typer.Argument(metavar="PUBFILE", help="Public key files (NAME.pub).")
    ],
    accept: Annotated[bool, typer.Option("--accept", help="Accept at once.")] = False,
    role: Annotated[
        RoleName | None,
        typer.Option("--role", help="For user keys (default: reader).", show_default=False),
    ] = None,
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register public key files: pending, or accepted with --accept.

    Example: pushjobs key add alice.pub --role writer --accept
    """
    reg = _registry(registry)
    state = KeyState.ACCEPTED if accept else KeyState.PENDING

    def one(path: str) -> dict[str, Any]:
        entry = reg.add(files.load_public(Path(path)), state=state, role=role)
        return {**_row(entry), "file": path}

    def say(result: dict[str, Any]) -> str:
        role_note = f", role {result['role']}" if result["role"] else ""
        return f"{result['name']}: {result['state']}{role_note} ({result['fingerprint']})"

    _each([str(p) for p in pubfiles], one, say, as_json, label="file")


@app.command("list")
@handle_errors
def list_keys(
    state: Annotated[
        StateName | None, typer.Option("--state", help="Only keys in this state.")
    ] = None,
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List registered keys: NAME KIND ROLE STATE FINGERPRINT.

    Example: pushjobs key list --state pending
    """
    entries = _registry(registry).list(state)
    if as_json:
        print_json([_row(e) for e in entries])
    elif entries:
        typer.echo(table([_row(e) for e in entries], COLUMNS))
    else:
        typer.echo("no keys" + (f" in state {state}" if state else ""))


@app.command("accept")
@handle_errors
def accept_keys(
    names: Annotated[list[str], typer.Argument(metavar="NAME", help="Names to accept.")],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Accept pending (or rejected) keys.

    Example: pushjobs key accept web-01 web-02
    """
    reg = _registry(registry)
    _each(names, _mover(reg, reg.accept), _said_move, as_json)


@app.command("reject")
@handle_errors
def reject_keys(
    names: Annotated[list[str], typer.Argument(metavar="NAME", help="Names to reject or revoke.")],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject pending keys; rejecting an accepted key revokes it at once.

    Example: pushjobs key reject web-13
    """
    reg = _registry(registry)
    _each(names, _mover(reg, reg.reject), _said_move, as_json)


@app.command("delete")
@handle_errors
def delete_keys(
    names: Annotated[
        list[str], typer.Argument(metavar="NAME", help="Names to delete (denied entries too).")
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete every entry of each name; the node must then be accepted anew.

    Example: pushjobs key delete old-node --yes
    """
    if not yes and not typer.confirm(f"delete every key of {', '.join(names)}?"):
        error("nothing deleted")
        raise typer.Exit(int(Exit.FAILED))
    reg = _registry(registry)

    def one(name: str) -> dict[str, Any]:
        removed = reg.delete([name])
        return {"name": name, "previous": removed[0].state.value, "state": "deleted"}

    _each(names, one, lambda r: f"{r['name']}: deleted (was {r['previous']})", as_json)


@app.command("role")
@handle_errors
def set_role(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="A user key's name.", show_default=False)
    ],
    role: Annotated[
        RoleName, typer.Argument(metavar="ROLE", help="The new role.", show_default=False)
    ],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a user's role: admin, writer (start and abort jobs) or reader.

    Example: pushjobs key role alice writer
    """
    entry = _registry(registry).set_role(name, role)
    if as_json:
        print_json(_row(entry))
    else:
        typer.echo(f"{entry.name}: role {entry.role}")


@app.command("show")
@handle_errors
def show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Name to show.", show_default=False)],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one key with its fingerprint, and any denied keys presented under its name.

    Example: pushjobs key show web-01
    """
    reg = _registry(registry)
    main = reg.get(name)
    denied = [e for e in reg.list(KeyState.DENIED) if e.name == name]
    if as_json:
        print_json({**_row(main), "denied": [_row(e) for e in denied]})
        return
    for field in ("name", "kind", "role", "state", "fingerprint", "curve_public"):
        value = getattr(main, field)
        if value is not None:
            typer.echo(f"{field:<12} {value}")
    for entry in denied:
        typer.echo(f"denied       {entry.fingerprint} (another key presented under this name)")


def _row(entry: Entry) -> dict[str, Any]:
    return entry.to_json()


def _mover(
    reg: KeyRegistry, move: Callable[[list[str]], list[Entry]]
) -> Callable[[str], dict[str, Any]]:
    def one(name: str) -> dict[str, Any]:
        before = reg.get(name)
        (after,) = move([name])
        return {"name": name, "previous": before.state.value, "state": after.state.value}

    return one


def _said_move(result: dict[str, Any]) -> str:
    return f"{result['name']}: {result['previous']} -> {result['state']}"


def _each(
    items: list[str],
    one: Callable[[str], dict[str, Any]],
    say: Callable[[dict[str, Any]], str],
    as_json: bool,
    *,
    label: str = "name",
) -> None:
    """Do ``one`` for every item, so that a bad one is reported and the others still done."""
    results: list[dict[str, Any]] = []
    for item in items:
        try:
            result = {"ok": True, **one(item)}
        except PushJobsError as exc:
            result = {"ok": False, label: item, "error": str(exc)}
            if not as_json:
                message = str(exc)
                error(message if message.startswith(item) else f"{item}: {message}")
        else:
            if not as_json:
                typer.echo(say(result))
        results.append(result)
    if as_json:
        print_json(results)
    if not all(r["ok"] for r in results):
        raise typer.Exit(int(Exit.FAILED))
