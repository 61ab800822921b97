"""``pushjobs node``: which nodes the server knows, and whether they are alive."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pushjobs.cli import userconfig
from pushjobs.cli.job_commands import ConfigOpt, JsonOpt, ServerOpt
from pushjobs.cli.render import handle_errors, print_json, printable, reading_reply, table

app = typer.Typer(
    help="Nodes: liveness, key state, current job, tags and facts.", no_args_is_help=True
)
COLUMNS = ("name", "state", "key", "job", "endpoint", "last_seen", "tags", "facts")


def _row(node: dict[str, Any]) -> dict[str, Any]:
    ago = node["last_seen_ms_ago"]
    return {
        "name": node["name"],
        "state": "online" if node["online"] else "offline",
        "key": node["key_state"],
        "job": node["job_id"] and f"{node['job_id']} ({node['job_state']})",
        "endpoint": node["command_endpoint"],
        "last_seen": None if ago is None else f"{ago / 1000:.1f}s ago",
        # What a selector matches (tag=web, os=linux): shown as a selector would say it.
        "tags": ",".join(node.get("tags") or ()),
        "facts": ",".join(f"{k}={v}" for k, v in sorted((node.get("facts") or {}).items())),
    }


def _show(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(result)
        return
    nodes = result["nodes"]
    typer.echo(table([_row(n) for n in nodes], COLUMNS))
    online = sum(1 for n in nodes if n["online"])
    typer.echo(f"{online} of {len(nodes)} nodes online")
    for n in nodes:
        second = n.get("duplicate")
        if second:
            warning = (
                f"warning: a second agent presented the key of {n['name']} from "
                f"{second['endpoint']} {second['refused_ms_ago'] / 1000:.0f} s ago (refused; "
                f"this node's agent is at {n['command_endpoint']})"
            )
            typer.echo(printable(warning), err=True)


@app.command("list")
@handle_errors
def list_nodes(
    config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """Every node the server knows or has a key for, with its tags and facts (what
    selectors like tag=web or os=linux match).

    Example: pushjobs node list --json
    """
    with userconfig.connect(config, server) as client, reading_reply():
        _show(client.call("node.list", {}), as_json)


@app.command("status")
@handle_errors
def status(
    nodes: Annotated[list[str], typer.Argument(metavar="NODE...")],
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Liveness, key state, facts and current job of the named nodes.

    Example: pushjobs node status web-01 web-02
    """
    with userconfig.connect(config, server) as client, reading_reply():
        _show(client.call("node.status", {"nodes": nodes}), as_json)
