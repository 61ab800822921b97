"""``pushjobs schedule``: jobs started later, once or by cron, by the leader."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from pushjobs.cli import userconfig
from pushjobs.cli.job_commands import (
    ConfigOpt,
    HaltOptions,
    JsonOpt,
    ServerOpt,
    duration_s,
    job_params,
    usage,
)
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
from pushjobs.cli.server_commands import partition_label

app = typer.Typer(help="Start jobs later: once, or on a cron schedule.", no_args_is_help=True)

IdArg = Annotated[str, typer.Argument(metavar="ID", help="A schedule id (schedule list).")]


def when(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except OSError:
        # Past this platform's time_t: a reply's figure, so told as the ValueError that a
        # year out of range raises (``reading_reply``), not as an I/O error.
        raise ValueError(f"a time out of range: {ms} ms") from None
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


@app.command("add")
@handle_errors
def add(
    command: CommandArg,
    nodes: NodesArg,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Once, at this time (2026-03-29T02:30Z; no offset: in --tz).",
            show_default=False,
        ),
    ] = None,
    in_: Annotated[
        str | None,
        typer.Option(
            "--in",
            metavar="DURATION",
            help="Once, this long from now (90s, 15m, 1h30m).",
            show_default=False,
        ),
    ] = None,
    cron: Annotated[
        str | None,
        typer.Option(
            "--cron",
            help="A cron expression ('0 3 * * *'; a leading seconds field is allowed).",
            show_default=False,
        ),
    ] = None,
    tz: Annotated[
        str, typer.Option("--tz", help="IANA time zone of --cron and --at (Europe/Berlin).")
    ] = "UTC",
    catch_up: Annotated[
        str,
        typer.Option(
            "--catch-up",
            help="Fires missed while no server could fire them: skip, once (one fire for "
            "all), or all (each, at most 100).",
        ),
    ] = "once",
    overlap: Annotated[
        str,
        typer.Option(
            "--overlap",
            help="When the previous fire is still outstanding (running, or not started "
            "yet): skip (at most one run outstanding), queue (run after it), allow.",
        ),
    ] = "skip",
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
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start COMMAND on the selected nodes later: once (--at, --in) or by --cron.

    Times are UTC unless --tz.

    At a daylight-saving change nothing fires twice or is lost: a wall time that does not
    exist that day fires just after the gap, one that happens twice fires once.

    Example: pushjobs schedule add backup 'db-*' --cron '30 2 * * *' --tz Europe/Berlin
    """
    triggers = [name for name, value in (("--at", at), ("--in", in_), ("--cron", cron)) if value]
    if len(triggers) != 1:
        raise usage("give exactly one of --at, --in and --cron")
    if catch_up not in ("skip", "once", "all"):
        raise usage("--catch-up is skip, once or all")
    if overlap not in ("skip", "queue", "allow"):
        raise usage("--overlap is skip, queue or allow")
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
    params.update(tz=tz, catch_up=catch_up, overlap=overlap)
    if at:
        params["at"] = at
    elif in_:
        params["in_s"] = duration_s(in_, "--in")
    else:
        params["cron"] = cron
    with userconfig.connect(config, server) as client, reading_reply():
        schedule = client.call("schedule.add", params)["schedule"]
        if as_json:
            print_json(schedule)
            return
        typer.echo(
            printable(
                f"schedule {schedule['schedule_id']}: {command} {schedule['when']}, "
                f"next {when(schedule['next_due_ms'])}"
            )
        )


def _next(s: dict[str, Any]) -> str:
    """The next due time, or ``paused`` (with the server's reason, if it paused it)."""
    if not s["paused"]:
        return when(s["next_due_ms"])
    reason = s.get("paused_reason")  # a server before automatic pauses sends none
    return f"paused: {reason}" if reason else "paused"


def _row(s: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": s["schedule_id"],
        "command": s["command"],
        "nodes": " ".join(s["nodes"]),
        "when": s["when"],
        "next": _next(s),
        "last job": (s.get("last_fire") or {}).get("job_id") or "-",
    }


@app.command("list")
@handle_errors
def list_schedules(
    config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """List schedules, oldest first.

    Example: pushjobs schedule list --json
    """
    with userconfig.connect(config, server) as client, reading_reply():
        result = client.call("schedule.list", {})
        if as_json:
            print_json(result)
            return
        rows = [_row(s) for s in result["schedules"]]
        # The next due time last: a pause's reason may be long.
        typer.echo(table(rows, ("id", "command", "nodes", "when", "last job", "next")))
        typer.echo(f"{len(rows)} schedules")


@app.command("show")
@handle_errors
def show(
    schedule_id: IdArg, config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """Show one schedule: its job, trigger, policies and next due time.

    Example: pushjobs schedule show 3f2a9c1b7d0e
    """
    with userconfig.connect(config, server) as client, reading_reply():
        schedule = client.call("schedule.show", {"schedule_id": schedule_id})["schedule"]
        if as_json:
            print_json(schedule)
            return
        _show_lines(schedule)


def _show_lines(schedule: dict[str, Any]) -> None:
    for name, value in (
        ("id", schedule["schedule_id"]),
        ("command", schedule["command"]),
        ("nodes", " ".join(schedule["nodes"])),
        ("when", schedule["when"]),
        ("runs", job_text(schedule.get("job") or {})),
        ("next", _next(schedule)),
        ("catch-up", schedule["catch_up"]),
        ("overlap", schedule["overlap"]),
        ("last job", (schedule.get("last_fire") or {}).get("job_id") or "-"),
        ("fired by", _owner(schedule)),
        ("created", f"{when(schedule['created_ms'])} by {schedule['created_by']}"),
    ):
        typer.echo(printable(f"{name:9} {value}"))


def job_text(job: dict[str, Any]) -> str:
    """How each fire runs, the options set on it: ``quorum 90%; batch 2 every 5s, at most 1
    failure; busy wait 300s; offline wait 28800s; halt-if check 'X' every 30s``."""
    parts = [f"quorum {job.get('quorum') or '100%'}"]
    options = job.get("options") or {}
    batch = options.get("batch")
    if batch:
        text = f"batch {batch['size']}"
        if batch.get("wait_s"):
            text += f" every {batch['wait_s']:g}s"
        if batch.get("max_failures") is not None:
            text += f", at most {batch['max_failures']} failures"
        parts.append(text)
    for key, label in (
        ("timeout_s", "timeout"),
        ("busy_wait_s", "busy wait"),
        ("offline_wait_s", "offline wait"),
    ):
        if job.get(key):
            parts.append(f"{label} {job[key]:g}s")
    halt = options.get("halt_if")
    if halt:
        signal = f"check {halt['check']!r}" if halt.get("check") else f"alert {halt['alert']!r}"
        parts.append(f"halt-if {signal} every {halt['every_s']:g}s")
    return "; ".join(parts)


def _owner(schedule: dict[str, Any]) -> str:
    """Which server fires it: ``server-b:1a2b (partition 3)``."""
    partition = schedule.get("partition")
    if partition is None:  # a server of a version before partitions were shown
        return "-"
    where = f"partition {partition_label(str(partition))}"
    owner = schedule.get("owner")
    if owner is None:
        return f"no live server yet ({where}: its owner's successor takes it shortly)"
    return f"{owner} ({where})"


def _change(
    method: str, schedule_id: str, config: Path | None, server: str | None, as_json: bool
) -> None:
    with userconfig.connect(config, server) as client, reading_reply():
        result = client.call(method, {"schedule_id": schedule_id})
        if as_json:
            print_json(result)
        elif method == "schedule.delete":
            typer.echo(printable(f"schedule {result['deleted']} deleted"))
        else:
            s = result["schedule"]
            state = _next(s) if s["paused"] else "next " + when(s["next_due_ms"])
            typer.echo(printable(f"schedule {schedule_id} {state}"))


@app.command("pause")
@handle_errors
def pause(
    schedule_id: IdArg, config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """Stop firing a schedule until it is resumed.

    Example: pushjobs schedule pause 3f2a9c1b7d0e
    """
    _change("schedule.pause", schedule_id, config, server, as_json)


@app.command("resume")
@handle_errors
def resume(
    schedule_id: IdArg, config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """Fire a paused schedule again, from its next due time (none missed while paused).

    Example: pushjobs schedule resume 3f2a9c1b7d0e
    """
    _change("schedule.resume", schedule_id, config, server, as_json)


@app.command("delete")
@handle_errors
def delete(
    schedule_id: IdArg, config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """Delete a schedule; the jobs it started stay.

    Example: pushjobs schedule delete 3f2a9c1b7d0e
    """
    _change("schedule.delete", schedule_id, config, server, as_json)


@app.command("history")
@handle_errors
def history(
    schedule_id: IdArg, config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """A schedule's latest fires: due time, job id, and the job's state.

    Example: pushjobs schedule history 3f2a9c1b7d0e
    """
    with userconfig.connect(config, server) as client, reading_reply():
        result = client.call("schedule.history", {"schedule_id": schedule_id})
        if as_json:
            print_json(result)
            return
        rows = [
            {
                "due": when(f["due_ms"]),
                "job": f.get("job_id") or "-",
                "state": f.get("job_state") or "-",
                "outcome": f.get("outcome") or "fired",
            }
            for f in result["fires"]
        ]
        typer.echo(table(rows, ("due", "job", "state", "outcome")))
