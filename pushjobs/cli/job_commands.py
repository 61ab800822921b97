"""``pushjobs job``: start jobs, follow them, read their output, abort them, and approve
or reject the ones the server's policy holds for a second admin."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from pushjobs.cli import jobview, userconfig
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.follow import INTERRUPTED, follow
from pushjobs.cli.jobopts import (
    BatchOpt,
    BatchWaitOpt,
    BusyWaitOpt,
    CaptureOpt,
    CommandArg,
    CwdOpt,
    EnvFileOpt,
    EnvOpt,
    HaltCheckEveryOpt,
    HaltCheckTimeoutOpt,
    HaltIfAlertOpt,
    HaltIfOpt,
    MaxFailuresOpt,
    NodesArg,
    OfflineWaitOpt,
    QuorumOpt,
    SecretEnvOpt,
    TimeoutOpt,
    VoteTimeoutOpt,
)
from pushjobs.cli.render import handle_errors, print_json, printable, reading_reply, table
from pushjobs.quorum import Quorum, Share
from pushjobs.states import JobState

app = typer.Typer(help="Start, follow, inspect and abort jobs.", no_args_is_help=True)

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Client config (default: $PUSHJOBS_CONFIG, else ~/.config/pushjobs/config.toml).",
        show_default=False,
    ),
]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", help="Server API endpoint, overriding the config.", show_default=False
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(int(Exit.USAGE))


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str, option: str) -> float:
    """``90`` (seconds, as ``--timeout``), ``90s``, ``15m``, ``2h``, ``1d``, or a sum like
    ``1h30m``; a usage error names ``option``."""
    expects = f"{option} expects a duration like 90s, 15m, 1h30m, 2d; got {text!r}"
    total, number = 0.0, ""
    for char in text.strip():
        if char.isdigit() or char == ".":
            number += char
        elif char in UNITS and number:
            total += float(number) * UNITS[char]
            number = ""
        else:
            raise usage(expects)
    try:
        total += float(number) if number else 0.0
    except ValueError:
        raise usage(expects) from None
    if total <= 0:
        raise usage(f"{option} must be more than 0")
    return total


def parse_env(pairs: list[str], option: str = "--env") -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise usage(f"{option} expects NAME=VALUE, NAME a variable name, got {pair!r}")
        env[name] = value
    return env


def parse_secret_env(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE``, or ``NAME`` alone: the value of ``$NAME`` here (kept out of ``ps``)."""
    env: dict[str, str] = {}
    for item in items:
        if "=" in item:
            env.update(parse_env([item], "--secret-env"))
        elif not ENV_NAME.fullmatch(item):
            raise usage(f"--secret-env expects NAME=VALUE or NAME, got {item!r}")
        elif item not in os.environ:
            raise usage(f"--secret-env {item}: ${item} is not set here")
        else:
            env[item] = os.environ[item]
    return env


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=VALUE`` lines (blank lines and ``#`` comments skipped), all sent as secrets."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError as exc:
        # A missing input, as the exit-code table says (8), like a missing key file.
        typer.echo(f"error: --env-file {path}: {exc.strerror}", err=True)
        raise typer.Exit(int(Exit.NOT_FOUND)) from None
    except OSError as exc:
        raise usage(f"--env-file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise usage(f"--env-file {path}: not UTF-8 text") from None
    env: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not ENV_NAME.fullmatch(name.strip()):
            # The line itself may hold a secret: name only where it is.
            raise usage(f"--env-file {path}:{number}: expected NAME=VALUE")
        env[name.strip()] = value
    return env


def job_env(env: list[str], secret_env: list[str], env_files: list[Path]) -> dict[str, Any]:
    """The ``env`` and ``secret_env`` params of ``job.start``; a name may be in one only."""
    plain = parse_env(env)
    secret: dict[str, str] = {}
    for path in env_files:
        secret.update(read_env_file(path))
    secret.update(parse_secret_env(secret_env))
    both = sorted(plain.keys() & secret.keys())
    if both:
        raise usage(f"{both[0]} is given both as --env and as a secret")
    params: dict[str, Any] = {"env": plain}
    if secret:
        params["secret_env"] = secret
    return params


def finish(job: dict[str, Any], as_json: bool) -> NoReturn:
    if as_json:
        print_json(job)
    else:
        typer.echo(jobview.node_table(job))
        typer.echo(jobview.headline(job))
    raise typer.Exit(int(jobview.exit_code_for(job)))


def batch_params(
    batch: str | None, batch_wait: float | None, max_failures: str | None
) -> dict[str, Any]:
    """The rolling-batch params of ``job.start``; a usage error names the bad option."""
    if batch is None:
        if batch_wait is not None or max_failures is not None:
            raise usage("--batch-wait and --max-failures need --batch")
        return {}
    if batch_wait is not None and not (math.isfinite(batch_wait) and batch_wait >= 0):
        raise usage(f"--batch-wait must be a finite number of seconds, 0 or more, not {batch_wait}")
    try:
        Share.parse(batch, "--batch")
        if max_failures is not None:
            Share.parse(max_failures, "--max-failures")
    except ValueError as exc:
        raise usage(str(exc)) from None
    params: dict[str, Any] = {"batch": batch}
    if batch_wait is not None:
        params["batch_wait_s"] = batch_wait
    if max_failures is not None:
        params["max_failures"] = max_failures
    return params


def job_params(
    command: str,
    nodes: list[str],
    *,
    quorum: str,
    timeout: float | None,
    vote_timeout: float | None,
    capture: bool,
    cwd: str | None,
    env: list[str] | None,
    secret_env: list[str] | None,
    env_file: list[Path] | None,
    batch: str | None,
    batch_wait: float | None,
    max_failures: str | None,
    busy_wait: str | None = None,
    offline_wait: str | None = None,
    halt: HaltOptions | None = None,
) -> dict[str, Any]:
    """The ``job.start`` params of the job options (``jobopts.py``), checked as far as
    the CLI can: ``job start`` and ``schedule add`` build them alike."""
    try:
        Quorum.parse(quorum)
    except ValueError as exc:
        raise usage(str(exc)) from None
    for name, value in (("--timeout", timeout), ("--vote-timeout", vote_timeout)):
        # inf and nan pass a comparison with 0 (or fail it for the wrong reason).
        if value is not None and not (math.isfinite(value) and value > 0):
            raise usage(f"{name} must be a finite number of seconds greater than 0, not {value}")
    params: dict[str, Any] = {
        "command": command,
        "nodes": nodes,
        "quorum": quorum,
        "capture": capture,
        "cwd": cwd,
        **job_env(env or [], secret_env or [], env_file or []),
        **batch_params(batch, batch_wait, max_failures),
    }
    if timeout is not None:
        params["timeout_s"] = timeout
    if vote_timeout is not None:
        params["vote_timeout_s"] = vote_timeout
    if busy_wait is not None:
        params["busy_wait_s"] = duration_s(busy_wait, "--busy-wait")
    if offline_wait is not None:
        params["offline_wait_s"] = duration_s(offline_wait, "--offline-wait")
    if halt is not None:
        params.update(halt.params(batch is not None))
    return params


@dataclass(frozen=True, slots=True)
class HaltOptions:
    """``--halt-if``, ``--halt-if-alert`` and their timing, as typed."""

    check: str | None = None
    alert: str | None = None
    every: str | None = None
    timeout: str | None = None

    def params(self, batch: bool) -> dict[str, Any]:
        """The ``job.start`` params of a health signal; a usage error names the option."""
        if self.check is None and self.alert is None:
            if self.every is not None or self.timeout is not None:
                raise usage(
                    "--halt-check-every and --halt-check-timeout need --halt-if or --halt-if-alert"
                )
            return {}
        if self.check is not None and self.alert is not None:
            raise usage("name one health signal: --halt-if or --halt-if-alert")
        if not batch:
            raise usage(
                "--halt-if and --halt-if-alert need --batch: without batches every node "
                "starts at once, and nothing is left to stop"
            )
        out: dict[str, Any] = (
            {"halt_if": self.check} if self.check is not None else {"halt_if_alert": self.alert}
        )
        if self.every is not None:
            out["halt_check_every_s"] = duration_s(self.every, "--halt-check-every")
        if self.timeout is not None:
            out["halt_check_timeout_s"] = duration_s(self.timeout, "--halt-check-timeout")
        return out


@app.command("start")
@handle_errors
def start(
    command: CommandArg,
    nodes: NodesArg,
    quorum: QuorumOpt = "100%",
    timeout: TimeoutOpt = None,
    vote_timeout: VoteTimeoutOpt = None,
    capture: CaptureOpt = False,
    env: EnvOpt = None,
    secret_env: SecretEnvOpt = None,
    env_file: EnvFileOpt = None,
    cwd: CwdOpt = None,
    batch: BatchOpt = None,
    batch_wait: BatchWaitOpt = None,
    max_failures: MaxFailuresOpt = None,
    busy_wait: BusyWaitOpt = None,
    offline_wait: OfflineWaitOpt = None,
    halt_if: HaltIfOpt = None,
    halt_if_alert: HaltIfAlertOpt = None,
    halt_check_every: HaltCheckEveryOpt = None,
    halt_check_timeout: HaltCheckTimeoutOpt = None,
    nowait: Annotated[bool, typer.Option("--nowait", help="Print the job id and return.")] = False,
    abort_on_interrupt: Annotated[
        bool,
        typer.Option(
            "--abort-on-interrupt",
            help="Ctrl-C aborts the job (else it keeps running and the command exits 130).",
        ),
    ] = False,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run COMMAND on the selected nodes and wait for every node to finish.

    Exit code 0 only if every node succeeded; every code is listed below.

    Example: pushjobs job start uptime 'web-*' --quorum 90% --timeout 60 --capture

    Rolling: pushjobs job start deploy 'web-*' --batch 25% --batch-wait 5 --max-failures 2

    Taking turns: pushjobs job start backup db-01 --busy-wait 10m (waits for db-01's job)

    Laptops: pushjobs job start patch 'laptop-*' --offline-wait 8h --nowait (each runs it
    once it is back; without --nowait this follows the job until then)

    Halting on health: pushjobs job start deploy 'web-*' --batch 10% --halt-if
    '/usr/local/bin/check-web' (a check the server's \\[halt] checks lists)

    Each node's env policy decides which variables a job may set; a refused one is named
    in that node's nack.

    A job the server's \\[policy] holds for approval is not started: this returns at once,
    naming the rule, and exits 11 (awaiting_approval) until another admin runs
    pushjobs job approve ID.
    """
    params = job_params(
        command,
        nodes,
        quorum=quorum,
        timeout=timeout,
        vote_timeout=vote_timeout,
        capture=capture,
        cwd=cwd,
        env=env,
        secret_env=secret_env,
        env_file=env_file,
        batch=batch,
        batch_wait=batch_wait,
        max_failures=max_failures,
        busy_wait=busy_wait,
        offline_wait=offline_wait,
        halt=HaltOptions(halt_if, halt_if_alert, halt_check_every, halt_check_timeout),
    )
    with userconfig.connect(config, server) as client, reading_reply():
        try:
            job = client.call("job.start", params)["job"]
        except KeyboardInterrupt:
            typer.echo(
                "interrupted before the server answered: the job may have started; "
                "see: pushjobs job list --state running",
                err=True,
            )
            raise typer.Exit(INTERRUPTED) from None
        if job["state"] == JobState.AWAITING_APPROVAL:
            awaiting(job, as_json, nowait)
        if nowait:
            if as_json:
                print_json(job)
            else:
                typer.echo(printable(job["job_id"]))
            return
        job = follow(client, job, show_progress=not as_json, abort_on_interrupt=abort_on_interrupt)
        finish(job, as_json)


def awaiting(job: dict[str, Any], as_json: bool, nowait: bool) -> NoReturn:
    """A job held for approval: say so, why, until when, and what to run next; exit 11.
    With ``--nowait`` the job id alone goes to stdout (``JOB=$(...)``), the rest to stderr."""
    if as_json:
        print_json(job)
        raise typer.Exit(int(Exit.AWAITING_APPROVAL))
    job_id = printable(job["job_id"])
    approval = job.get("approval") or {}
    until = jobview.local_time(int(approval.get("expires_ms", 0)))
    if nowait:
        typer.echo(job_id)
    lines = [
        f"job {job_id} awaits approval: {printable(approval.get('rule', ''))}",
        f"another admin may approve it until {until} (then it expires):",
        f"  pushjobs job approve {job_id}",
        f"  pushjobs job reject {job_id} --reason WHY",
        f"follow it: pushjobs job status {job_id} --watch",
    ]
    typer.echo("\n".join(lines), err=nowait)
    raise typer.Exit(int(Exit.AWAITING_APPROVAL))


@app.command("list")
@handle_errors
def list_jobs(
    state: Annotated[
        str | None, typer.Option("--state", help="Only jobs in this state.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip the newest N.")] = 0,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first.

    Example: pushjobs job list --state running
    """
    if state is not None and state not in {s.value for s in JobState}:
        raise usage(f"unknown state {state!r}: one of {', '.join(s.value for s in JobState)}")
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if state is not None:
        params["state"] = state
    with userconfig.connect(config, server) as client, reading_reply():
        show_jobs(client.call("job.list", params), as_json)


def show_jobs(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(result)
        return
    rows = [
        {
            "id": j["job_id"],
            "command": j["command"],
            "state": j["state"],
            "nodes": j["targets"],
            "summary": jobview.summary_text(j) + jobview.approval_text(j),
            "created": jobview.local_time(j["created_ms"]),
        }
        for j in result["jobs"]
    ]
    typer.echo(table(rows, ("id", "command", "state", "nodes", "summary", "created")))
    typer.echo(f"{len(rows)} of {result['total']} jobs")


@app.command("status")
@handle_errors
def status(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    watch: Annotated[bool, typer.Option("--watch", help="Follow until the job ends.")] = False,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a job and the state of each of its nodes (exit code as for job start).

    Example: pushjobs job status 1a2b3c --watch
    """
    with userconfig.connect(config, server) as client, reading_reply():
        job = client.call("job.status", {"job_id": job_id})["job"]
        if watch:
            job = follow(client, job, show_progress=not as_json)
        if watch or job["state"] in jobview.TERMINAL:
            finish(job, as_json)
        if as_json:
            print_json(job)
        else:
            typer.echo(jobview.node_table(job))
            typer.echo(jobview.headline(job))


@app.command("output")
@handle_errors
def output(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    node: Annotated[str, typer.Argument(metavar="NODE")],
    channel: Annotated[str, typer.Option("--channel", help="stdout or stderr.")] = "stdout",
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print what a node's command wrote (kept with --capture, and for every failure).

    Example: pushjobs job output 1a2b3c web-01 --channel stderr
    """
    if channel not in ("stdout", "stderr"):
        raise usage("--channel must be stdout or stderr")
    with userconfig.connect(config, server) as client, reading_reply():
        result = client.call("job.output", {"job_id": job_id, "node": node})
        if as_json:
            print_json(result)
            return
        # What the command wrote, as it wrote it: the one free text shown raw, on purpose.
        sys.stdout.write(result[channel])
        if result[f"{channel}_truncated"]:
            typer.echo(f"(only the tail of {channel} was kept)", err=True)


@app.command("abort")
@handle_errors
def abort(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Abort a job: unfinished nodes are told to kill the command.

    Example: pushjobs job abort 1a2b3c
    """
    with userconfig.connect(config, server) as client, reading_reply():
        # A job that has ended is refused ``conflict``: exit code 10 (any other error), as
        # the table says; it was 1, which says a job ran and part of it failed.
        job = client.call("job.abort", {"job_id": job_id})["job"]
        if as_json:
            print_json(job)
        else:
            state = printable(f"job {job_id} {job['state']}")
            typer.echo(f"{state}: {jobview.summary_text(job)}")


ReasonOpt = Annotated[
    str,
    typer.Option(
        "--reason", help="Why: kept in the job and in the log's events.", show_default=False
    ),
]


@app.command("approve")
@handle_errors
def approve(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why (optional): kept in the job and the log.")
    ] = "",
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve a job the server's policy holds (awaiting_approval): its vote begins.

    Needs an admin key other than the one that started the job: a second pair of eyes.
    Who approved, when and why is kept in the job and in the log's events.

    Example: pushjobs job approve 1a2b3c --reason "change CHG-42"

    Then follow it: pushjobs job status 1a2b3c --watch
    """
    _decide("job.approve", job_id, reason, config, server, as_json)


@app.command("reject")
@handle_errors
def reject(
    job_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: ReasonOpt,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject a job the server's policy holds: it ends rejected, no node ever asked.

    Any admin may reject, the job's requester too (withdrawing it); the reason is shown
    to whoever follows the job and kept in the log's events.

    Example: pushjobs job reject 1a2b3c --reason "not during the freeze"
    """
    _decide("job.reject", job_id, reason, config, server, as_json)


def _decide(
    method: str, job_id: str, reason: str, config: Path | None, server: str | None, as_json: bool
) -> None:
    with userconfig.connect(config, server) as client, reading_reply():
        # Refused: the requester's own approval (unauthorized, 7); a job not awaiting
        # approval (conflict, 10); no such job (8).
        job = client.call(method, {"job_id": job_id, "reason": reason})["job"]
        if as_json:
            print_json(job)
        else:
            typer.echo(jobview.headline(job))
