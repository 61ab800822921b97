"""``pushjobs quickstart``: a whole installation on loopback, one real job, then clean up.

It generates keys in a temporary directory, starts a server and a few agents as real
processes, waits for the nodes to come online, runs a whitelisted command on all of them,
shows each node's result and output, and stops every process it started.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from pushjobs.api.client import ApiClient
from pushjobs.cli import jobview
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import handle_errors, print_json, table
from pushjobs.errors import PushJobsError, Unreachable
from pushjobs.testbed.sandbox import DEFAULT_WHITELIST, Sandbox


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        typer.echo(text, err=True)


def _wait_online(client: ApiClient, names: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = client.call("node.status", {"nodes": names})["nodes"]
        if all(row["online"] for row in rows):
            return
        if time.monotonic() >= deadline:
            offline = [row["name"] for row in rows if not row["online"]]
            raise Unreachable(f"nodes not online after {timeout_s:g} s: {', '.join(offline)}")
        time.sleep(0.05)  # the server is another process: a bounded poll


def _follow(client: ApiClient, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while job["state"] not in jobview.TERMINAL:
        if time.monotonic() >= deadline:
            raise Unreachable(f"job {job['job_id']} still {job['state']} after {timeout_s:g} s")
        params = {"job_id": job["job_id"], "version": job["version"], "wait_s": 2.0}
        job = client.call("job.watch", params)["job"]
    return job


def quickstart(
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=20, help="How many agents.")] = 3,
    command: Annotated[
        str,
        typer.Option("--command", help=f"Whitelisted command ({', '.join(DEFAULT_WHITELIST)})."),
    ] = "hello",
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Work here and keep the files (default: a temp dir, removed).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the finished job as JSON.")
    ] = False,
) -> None:
    """Run a server and local agents on loopback, push one real job to them, show the result.

    Everything lives in a temporary directory and every process is stopped at the end.
    Example: pushjobs quickstart --nodes 5 --command uptime
    """
    handle_errors(_quickstart)(nodes, command, directory, as_json)


def _quickstart(nodes: int, command: str, directory: Path | None, as_json: bool) -> None:
    started = time.monotonic()
    root = directory or Path(tempfile.mkdtemp(prefix="pushjobs-quickstart-"))
    root.mkdir(parents=True, exist_ok=True)
    names = [f"node-{i}" for i in range(1, nodes + 1)]
    sandbox = Sandbox(root, nodes=names)
    quiet = as_json
    code = Exit.ERROR
    try:
        sandbox.prepare()
        _say(quiet, f"keys for server, admin and {nodes} nodes in {root}/keys (nodes accepted)")
        server = sandbox.start_server()
        _say(quiet, f"server up (pid {server.pid}) api={sandbox.api}")
        sandbox.start_agents()
        pids = ", ".join(str(sandbox.procs[n].pid) for n in names)
        _say(quiet, f"{nodes} agents up (pids {pids})")
        client = ApiClient.from_files(
            sandbox.api, root / "keys" / "server.pub", root / "keys" / f"{sandbox.user}.key"
        )
        with client:
            _wait_online(client, names, timeout_s=20.0)
            _say(quiet, f"all {nodes} nodes online after {time.monotonic() - started:.1f} s")
            params = {"command": command, "nodes": names, "capture": True, "timeout_s": 30.0}
            job = client.call("job.start", params)["job"]
            _say(quiet, f"job {job['job_id']}: {command} on {', '.join(names)}")
            job = _follow(client, job, timeout_s=60.0)
            outputs = {}
            for name, node in job["nodes"].items():
                if node["state"] in ("succeeded", "failed"):
                    try:
                        found = client.call("job.output", {"job_id": job["job_id"], "node": name})
                        outputs[name] = found["stdout"].strip().splitlines()
                    except PushJobsError:
                        outputs[name] = []
        code = jobview.exit_code_for(job)
        if as_json:
            print_json({"job": job, "output": outputs, "dir": str(root)})
        else:
            rows = [
                {
                    "node": name,
                    "state": node["state"],
                    "exit": node["exit_status"],
                    "output": (outputs.get(name) or [""])[-1][:60],
                }
                for name, node in job["nodes"].items()
            ]
            typer.echo(table(rows, ("node", "state", "exit", "output")))
            summary = ", ".join(f"{n} {s}" for s, n in job["summary"].items())
            typer.echo(f"job {job['job_id']} {job['state']}: {summary}")
    finally:
        sandbox.stop()
        _say(quiet, f"stopped the server and {nodes} agents ({time.monotonic() - started:.1f} s)")
        if directory is None:
            shutil.rmtree(root, ignore_errors=True)
        else:
            _say(quiet, f"files kept in {root}")
    raise typer.Exit(int(code))
