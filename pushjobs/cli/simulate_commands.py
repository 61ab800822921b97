"""``pushjobs simulate``: play thousands of nodes against a real server, and enrol them.

``simulate enroll`` writes the simulated nodes' public keys into the server's key registry
in one write (accepted, or pending for an admin to accept); ``simulate run`` plays them.
Both derive the keys from the same ``--seed`` and ``--prefix``, so nothing is stored.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from pushjobs import paths
from pushjobs.cli.render import handle_errors, print_json
from pushjobs.cli.userconfig import split_endpoints

app = typer.Typer(
    help="A simulated fleet: many nodes speaking the real protocol from one process.",
    no_args_is_help=True,
)

NodesOpt = Annotated[
    int, typer.Option("--nodes", "-n", min=1, max=1_000_000, help="How many nodes to play.")
]
FirstOpt = Annotated[
    int,
    typer.Option(
        "--first", min=0, help="Index of the first node (split a fleet across processes)."
    ),
]
PrefixOpt = Annotated[str, typer.Option("--prefix", help="Node names are PREFIX + 5-digit index.")]
SeedOpt = Annotated[
    str,
    typer.Option(
        "--seed",
        help="Keys are derived from it: anyone who knows it can act as these nodes, so "
        "use a secret one against a server that matters.",
    ),
]


@app.command("enroll")
@handle_errors
def enroll(
    nodes: NodesOpt,
    first: FirstOpt = 0,
    prefix: PrefixOpt = "sim-",
    seed: SeedOpt = "pushjobs-simulator",
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry",
            help="A key registry file (default: $PUSHJOBS_KEY_REGISTRY, "
            "else $PUSHJOBS_HOME/registry.json).",
            show_default=False,
        ),
    ] = None,
    server_config: Annotated[
        Path | None,
        typer.Option(
            "--server-config",
            help="Enrol into the registry of the server this config describes (its "
            "ordered log), instead of a file.",
            show_default=False,
        ),
    ] = None,
    pending: Annotated[
        bool, typer.Option("--pending", help="Leave them pending for an admin to accept.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Register the simulated nodes' keys in one write (accepted unless --pending).

    Example: pushjobs simulate enroll --nodes 10000 --registry /srv/pushjobs/registry.json
    """
    from keys.keystates import KeyState
    from pushjobs.cli.keyadmin import file_keys, server_registry
    from pushjobs.testbed.simkeys import SimKeys

    started = time.monotonic()
    keys = SimKeys(seed, prefix)
    state = KeyState.PENDING if pending else KeyState.ACCEPTED
    opened = (
        server_registry(server_config)
        if server_config is not None
        else contextlib.nullcontext(file_keys(registry or paths.registry_path()))
    )
    with opened as local:
        reg = local.registry
        added = reg.add_many(keys.publics(first, nodes), state=state)
    took = time.monotonic() - started
    result = {
        "registry": reg.where,
        "nodes": nodes,
        "added": added,
        "already": nodes - added,
        "state": state.value,
        "seconds": round(took, 3),
    }
    if as_json:
        print_json(result)
    else:
        typer.echo(
            f"{added} simulated node keys added to {reg.where} as {state.value} "
            f"({nodes - added} already there) in {took:.2f} s"
        )


@app.command("run")
@handle_errors
def run(
    api: Annotated[
        list[str],
        typer.Option(
            "--api",
            help="A server's API endpoint, e.g. tcp://127.0.0.1:4650; repeat it (or separate "
            "by commas) for each server of an installation with a standby: the simulated "
            "fleet follows the leader.",
        ),
    ],
    server_key: Annotated[
        Path, typer.Option("--server-key", help="The server's public key file (server.pub).")
    ],
    nodes: NodesOpt,
    first: FirstOpt = 0,
    prefix: PrefixOpt = "sim-",
    seed: SeedOpt = "pushjobs-simulator",
    bind: Annotated[
        str, typer.Option("--bind", help="Where the shared command socket binds.")
    ] = "tcp://127.0.0.1:*",
    commit_delay: Annotated[
        float, typer.Option("--commit-delay", min=0, help="Seconds before a commit is answered.")
    ] = 0.0,
    run_delay: Annotated[
        float, typer.Option("--run-delay", min=0, help="Seconds a simulated command runs.")
    ] = 0.0,
    fail_rate: Annotated[
        float, typer.Option("--fail-rate", min=0, max=1, help="Share of runs that fail.")
    ] = 0.0,
    nack_rate: Annotated[
        float, typer.Option("--nack-rate", min=0, max=1, help="Share of commits nacked.")
    ] = 0.0,
    crash_rate: Annotated[
        float,
        typer.Option(
            "--crash-rate", min=0, max=1, help="Share of runs during which the node restarts."
        ),
    ] = 0.0,
    window: Annotated[
        int, typer.Option("--window", min=1, help="Config requests in flight at once.")
    ] = 256,
    splay: Annotated[
        float,
        typer.Option(
            "--splay", min=0, help="Spread rediscovery after a server restart or an edge lost (s)."
        ),
    ] = 10.0,
    duration: Annotated[
        float | None,
        typer.Option("--duration", min=0, help="Stop after this many seconds (default: never)."),
    ] = None,
    rng_seed: Annotated[
        int | None,
        typer.Option("--random-seed", help="Seed the outcome draws, for repeatable runs."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log more.")] = False,
) -> None:
    """Play NODES nodes against a server until stopped (SIGTERM/SIGINT or --duration).

    Prints a ready line, a 'configured' line once every node has its config, and JSON lines
    for control commands read from stdin: 'stats', 'silence A B', 'resume A B',
    'restart A B' (local node indexes, end excluded).

    Example: pushjobs simulate enroll --nodes 1000 && \\
    pushjobs simulate run --api tcp://127.0.0.1:4650 --server-key keys/server.pub -n 1000
    """
    endpoints = split_endpoints(api)
    if not endpoints:
        raise typer.BadParameter("give at least one endpoint", param_hint="--api")
    settings = {
        "api": endpoints[0],
        "servers": endpoints[1:],
        "server_key": str(server_key.resolve()),
        "nodes": nodes,
        "first": first,
        "prefix": prefix,
        "seed": seed,
        "bind": bind,
        "behaviour": {
            "commit_delay_s": commit_delay,
            "run_delay_s": run_delay,
            "fail_rate": fail_rate,
            "nack_rate": nack_rate,
            "crash_rate": crash_rate,
        },
        "window": window,
        "splay_s": splay,
        "duration_s": duration,
        "rng_seed": rng_seed,
        "verbose": verbose,
    }
    # The simulator is a fleet-side program: this process becomes it (same pid, stdin,
    # stdout and signals), and the toolkit does not import the agent package.
    sys.stdout.flush()
    argv = [sys.executable, "-m", "agent.simulator", json.dumps(settings)]
    os.execv(sys.executable, argv)
