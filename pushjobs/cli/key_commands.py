"""``pushjobs key``: generate identity keys and manage the key registry, as salt-key does.

With a client config (the one ``pushjobs job`` uses) the registry commands ask the server,
which needs the ``admin`` role: the registry is the server's, wherever it runs. A registry
is opened directly only when named: ``--server-config SERVER_TOML`` (the server's own
ordered log), ``--registry FILE`` or ``$PUSHJOBS_KEY_REGISTRY`` (bootstrapping the first
admin on the server's host before its first start), or, with no client config at all, the
default file under ``$PUSHJOBS_HOME``. Every output says which (``keyadmin.py``, in this package).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from keys import files
from keys.identity import generate
from pushjobs import paths
from pushjobs.cli.exitcodes import Exit, for_error
from pushjobs.cli.keyadmin import Keys, target
from pushjobs.cli.render import error, handle_errors, print_json, printable, table
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
        help="Work on this registry file directly instead of asking the server "
        "(the first admin, before the server's first start imports the file; a file a "
        "server imported is refused; default: $PUSHJOBS_KEY_REGISTRY).",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Client config naming the server (default: $PUSHJOBS_CONFIG, else "
        "~/.config/pushjobs/config.toml).",
        show_default=False,
    ),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", help="Server API endpoint, overriding the config.", show_default=False
    ),
]
ServerConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--server-config",
        help="Work directly on the registry of the server this config describes: its "
        'ordered log (or its file, with key_store = "file"). For an admin locked out or '
        "a server that is down.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
COLUMNS = ("name", "kind", "role", "state", "fingerprint")


@contextlib.contextmanager
def _keys(
    registry: Path | None, config: Path | None, server: str | None, server_config: Path | None
) -> Iterator[Keys]:
    with target(registry, config, server, server_config) as keys:
        for note in getattr(keys, "notes", ()):
            typer.echo(note, err=True)
        yield keys


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
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register public key files: pending, or accepted with --accept.

    Example: pushjobs key add alice.pub --role writer --accept
    """

    def say(result: dict[str, Any]) -> str:
        role_note = f", role {result['role']}" if result["role"] else ""
        return printable(
            f"{result['name']}: {result['state']}{role_note} ({result['fingerprint']})"
        )

    with _keys(registry, config, server, server_config) as keys, keys.reading():

        def one(path: str) -> dict[str, Any]:
            return {**keys.add(files.load_public(Path(path)), role, accept), "file": path}

        _each([str(p) for p in pubfiles], one, say, as_json, label="file")


@app.command("list")
@handle_errors
def list_keys(
    pattern: Annotated[
        str | None,
        typer.Argument(
            metavar="PATTERN", help="Only names matching this glob.", show_default=False
        ),
    ] = None,
    state: Annotated[
        StateName | None, typer.Option("--state", help="Only keys in this state.")
    ] = None,
    registry: RegistryOpt = None,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List registered keys: NAME KIND ROLE STATE FINGERPRINT.

    Example: pushjobs key list --state pending
    """
    with _keys(registry, config, server, server_config) as keys, keys.reading():
        rows = keys.rows(state, pattern)
        if as_json:
            print_json(rows)
        elif rows:
            typer.echo(table(rows, COLUMNS))
        else:
            what = f" in state {state}" if state else ""
            what += f" matching {pattern!r}" if pattern else ""
            typer.echo(f"no keys{what} ({keys.where})")


NamesArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="NAME", help="Names or shell globs ('web-*').", show_default=False),
]


@app.command("accept")
@handle_errors
def accept_keys(
    names: NamesArg = None,
    everything: Annotated[
        bool, typer.Option("--all", "-A", help="Accept every pending key (like salt-key -A).")
    ] = False,
    registry: RegistryOpt = None,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Accept pending (or rejected) keys.

    Example: pushjobs key accept web-01 'db-*'     pushjobs key accept --all
    """
    with _keys(registry, config, server, server_config) as keys, keys.reading():
        _move("accept", names, everything, keys, as_json)


@app.command("reject")
@handle_errors
def reject_keys(
    names: NamesArg = None,
    registry: RegistryOpt = None,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject pending keys; rejecting an accepted key revokes it at once.

    Example: pushjobs key reject web-13
    """
    with _keys(registry, config, server, server_config) as keys, keys.reading():
        _move("reject", names, False, keys, as_json)


@app.command("delete")
@handle_errors
def delete_keys(
    names: NamesArg = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    registry: RegistryOpt = None,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete every entry of each name (denied ones too); the node must be accepted anew.

    Example: pushjobs key delete old-node --yes
    """
    if names and not yes and not typer.confirm(f"delete every key of {', '.join(names)}?"):
        error("nothing deleted")
        raise typer.Exit(int(Exit.FAILED))
    with _keys(registry, config, server, server_config) as keys, keys.reading():
        _move("delete", names, False, keys, as_json)


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
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a user's role: admin, writer (start and abort jobs) or reader.

    Example: pushjobs key role alice writer
    """
    with _keys(registry, config, server, server_config) as keys, keys.reading():
        entry = keys.set_role(name, role)
        if as_json:
            print_json(entry)
        else:
            typer.echo(printable(f"{entry['name']}: role {entry['role']}"))


@app.command("show")
@handle_errors
def show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Name to show.", show_default=False)],
    registry: RegistryOpt = None,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    server_config: ServerConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one key with its fingerprint, and the other keys tried under its name.

    Example: pushjobs key show web-01
    """
    with _keys(registry, config, server, server_config) as keys, keys.reading():
        shown = keys.show(name)
        if as_json:
            print_json(shown)
        else:
            _show_key(shown)


def _show_key(shown: dict[str, Any]) -> None:
    main = shown["key"]
    for field in ("name", "kind", "role", "state", "fingerprint", "curve_public"):
        if main.get(field) is not None:
            typer.echo(printable(f"{field:<12} {main[field]}"))
    for entry in shown["denied"]:
        typer.echo(
            printable(
                f"denied       {entry['fingerprint']} (the last of {entry['attempts']} other "
                "key(s) presented under this name)"
            )
        )


def _move(
    action: str, names: list[str] | None, everything: bool, keys: Keys, as_json: bool
) -> None:
    if not names and not everything:
        error(
            f"name the keys to {action} (names or globs)"
            + (", or --all" if action == "accept" else "")
        )
        raise typer.Exit(int(Exit.USAGE))
    results = keys.move(action, names or [], everything)
    for result in results:
        if as_json:
            continue
        if result["ok"] and result["previous"] == result["state"]:
            typer.echo(printable(f"{result['name']}: already {result['state']}"))
        elif result["ok"]:
            typer.echo(printable(f"{result['name']}: {result['previous']} -> {result['state']}"))
        else:
            message = str(result["error"])
            name = str(result["name"])
            error(printable(message if message.startswith(name) else f"{name}: {message}"))
    if as_json:
        print_json(results)
    failed = [r for r in results if not r["ok"]]
    if failed:
        # Nothing done because no name was known: "no such key", as `key show` says it.
        unknown = len(failed) == len(results) and all(r.get("code") == "not_found" for r in failed)
        raise typer.Exit(int(Exit.NOT_FOUND if unknown else Exit.FAILED))


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
            result = {"ok": False, label: item, "error": str(exc), "exit": int(for_error(exc))}
            if not as_json:
                # The server's words, which may quote what it was sent: one line.
                message = printable(str(exc))
                error(message if message.startswith(item) else f"{item}: {message}")
        else:
            if not as_json:
                typer.echo(say(result))
        results.append(result)
    if as_json:
        print_json([{k: v for k, v in r.items() if k != "exit"} for r in results])
    failed = {r["exit"] for r in results if not r["ok"]}
    if failed:
        # Nothing done, every item for one reason: that reason's code (a missing key file
        # is 8, as for ``key show``); part done: 1, as the table says.
        whole = len(failed) == 1 and not any(r["ok"] for r in results)
        raise typer.Exit(failed.pop() if whole else int(Exit.FAILED))
