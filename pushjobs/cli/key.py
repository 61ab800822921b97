"""``pushjobs key``: generate identity keys and manage the key registry, as salt-key does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from keys import files
from keys.identity import KINDS, generate
from keys.registry import ROLES, Entry, KeyRegistry, KeyState
from pushjobs import paths
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import error, handle_errors, print_json, table
from pushjobs.errors import PushJobsError

app = typer.Typer(
    help="Identity keys and the key registry (pending / accepted / rejected / denied).",
    no_args_is_help=True,
)

RegistryOpt = Annotated[
    Path | None,
    typer.Option(
        "--registry",
        help="Key registry file [env PUSHJOBS_KEY_REGISTRY; default $PUSHJOBS_HOME/registry.json]",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
COLUMNS = ("name", "kind", "role", "state", "fingerprint")


def _registry(path: Path | None) -> KeyRegistry:
    return KeyRegistry(path or paths.registry_path())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _row(entry: Entry) -> dict[str, Any]:
    return entry.to_json()


@app.command("gen")
@handle_errors
def gen(
    name: Annotated[str, typer.Argument(help="Node, user or server name.")],
    kind: Annotated[str, typer.Option("--kind", help=f"One of: {', '.join(KINDS)}.")] = "node",
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", help="Where to write NAME.key and NAME.pub [default $PUSHJOBS_HOME/keys]"
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace existing key files.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Generate an identity: NAME.key (private, mode 0600) and NAME.pub.

    Example: pushjobs key gen web-01 --kind node --dir /etc/pushjobs/keys
    """
    identity = generate(name, kind)
    key_path, pub_path = files.save(identity, directory or paths.keys_dir(), force=force)
    result = {
        "name": name,
        "kind": identity.public.kind,
        "private": str(key_path),
        "public": str(pub_path),
        "fingerprint": identity.public.fingerprint,
    }
    if as_json:
        print_json(result)
    else:
        typer.echo(f"wrote {key_path} (private, 0600) and {pub_path}")
        typer.echo(f"fingerprint {identity.public.fingerprint}")


@app.command("add")
@handle_errors
def add(
    pubfiles: Annotated[list[Path], typer.Argument(help="Public key files (NAME.pub).")],
    accept: Annotated[bool, typer.Option("--accept", help="Accept at once.")] = False,
    role: Annotated[
        str | None, typer.Option("--role", help=f"For users: one of {', '.join(ROLES)}.")
    ] = None,
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register public keys (pending unless --accept).

    Example: pushjobs key add alice.pub --role writer --accept
    """
    reg = _registry(registry)
    state = KeyState.ACCEPTED if accept else KeyState.PENDING
    added = [reg.add(files.load_public(p), _now_ms(), state=state, role=role) for p in pubfiles]
    if as_json:
        print_json([_row(e) for e in added])
    else:
        for entry in added:
            typer.echo(f"{entry.name}: {entry.state} ({entry.fingerprint})")


@app.command("list")
@handle_errors
def list_keys(
    state: Annotated[
        str | None,
        typer.Option("--state", help="Only this state: pending, accepted, rejected, denied."),
    ] = None,
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List registered keys.

    Example: pushjobs key list --state pending
    """
    if state is not None and state not in {s.value for s in KeyState}:
        error(f"unknown state {state!r}: expected pending, accepted, rejected or denied")
        raise typer.Exit(int(Exit.USAGE))
    entries = _registry(registry).entries(state)
    if as_json:
        print_json([_row(e) for e in entries])
    elif entries:
        typer.echo(table([_row(e) for e in entries], COLUMNS))
    else:
        typer.echo("no keys" + (f" in state {state}" if state else ""))


def _each(names: list[str], registry: Path | None, as_json: bool, verb: str, apply: Any) -> None:
    """Apply to each name on its own, so one bad name does not stop the others."""
    reg = _registry(registry)
    results: list[dict[str, Any]] = []
    failed = False
    for name in names:
        try:
            for entry in apply(reg, name):
                results.append({"name": entry.name, "ok": True, "state": entry.state.value})
                if not as_json:
                    typer.echo(f"{entry.name}: {verb} (now {entry.state})")
        except PushJobsError as exc:
            failed = True
            results.append({"name": name, "ok": False, "error": str(exc)})
            if not as_json:
                error(f"{name}: {exc}")
    if as_json:
        print_json(results)
    if failed:
        raise typer.Exit(int(Exit.FAILED))


@app.command("accept")
@handle_errors
def accept_keys(
    names: Annotated[list[str], typer.Argument(help="Names to accept.")],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Accept pending (or rejected) keys.

    Example: pushjobs key accept web-01 web-02
    """
    _each(names, registry, as_json, "accepted", lambda r, n: r.accept([n], _now_ms()))


@app.command("reject")
@handle_errors
def reject_keys(
    names: Annotated[list[str], typer.Argument(help="Names to reject or revoke.")],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject pending keys; rejecting an accepted key revokes it.

    Example: pushjobs key reject web-13
    """
    _each(names, registry, as_json, "rejected", lambda r, n: r.reject([n], _now_ms()))


@app.command("delete")
@handle_errors
def delete_keys(
    names: Annotated[list[str], typer.Argument(help="Names to delete (denied entries too).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete every entry of each name.

    Example: pushjobs key delete old-node --yes
    """
    if not yes and not typer.confirm(f"delete {', '.join(names)}?"):
        raise typer.Exit(int(Exit.FAILED))
    _each(names, registry, as_json, "deleted", lambda r, n: r.delete([n]))


@app.command("show")
@handle_errors
def show(
    name: Annotated[str, typer.Argument(help="Name to show.")],
    registry: RegistryOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one key with its fingerprint (denied keys of the same name too).

    Example: pushjobs key show web-01
    """
    reg = _registry(registry)
    main = reg.get(name)
    denied = [e for e in reg.entries(KeyState.DENIED) if e.name == name]
    if as_json:
        print_json({**_row(main), "denied": [_row(e) for e in denied]})
        return
    for field in ("name", "kind", "role", "state", "fingerprint", "curve_public"):
        value = getattr(main, field)
        if value is not None:
            typer.echo(f"{field:<12} {value}")
    for entry in denied:
        typer.echo(f"denied       {entry.fingerprint} (another key presented under this name)")
