"""``pushjobs audit``: check the log's audit trail offline, and tell a job's story from it.

Like ``pushjobs log``, these commands open the log directly (the SQLite file, a copy of
it, or a Kafka cluster), so they work while every server is stopped, and need nothing of
the installation but the server's public key (``server.pub``: no secret). The check is
``pushjobs.audit.verifier``; this module reads the records and renders the report.

An archive written by ``pushjobs archive`` cannot be checked: it keeps the events as
Parquet rows, not the records' bytes, and no other topic. Keep a copy of the log file
(``sqlite3 log.db ".backup copy.db"``) to check it later.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from keys import files
from pushjobs import paths
from pushjobs.cli import userconfig
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.log_commands import (
    BackendOpt,
    BootstrapOpt,
    JsonOpt,
    LogOpt,
    log_settings,
    opened,
)
from pushjobs.cli.render import handle_errors, print_json
from pushjobs.errors import ConfigError, KeyFileError, MissingKeyFile
from pushjobs.log import topics as std
from pushjobs.log.base import OrderedLog, Record
from pushjobs.protocol.signing import Ed25519Verifier, ed25519_verifier

if TYPE_CHECKING:  # the checker and the story load when a command needs them: every
    # other command of the CLI starts faster without them
    from pushjobs.audit.verifier import Report

app = typer.Typer(
    help="The audit trail: check the log has not been tampered with; who did what to a job.",
    no_args_is_help=True,
)

KeyOpt = Annotated[
    Path | None,
    typer.Option(
        "--key",
        help="The server's public key: its .pub file, or a keys directory holding one "
        "server key (default: server_key of the CLI config, else $PUSHJOBS_HOME/keys).",
        show_default=False,
    ),
]
PrefixOpt = Annotated[
    str | None,
    typer.Option(
        "--prefix",
        help="The installation's topic prefix (default: the topic_prefix of the server's "
        "\\[log] when its config names the log, else pushjobs.).",
        show_default=False,
    ),
]
READ_CHUNK = 1000


def _records(handle: OrderedLog, topic: str) -> Iterator[Record]:
    offset = 0
    while True:
        batch = handle.read(topic, offset, READ_CHUNK)
        yield from batch
        if len(batch) < READ_CHUNK:
            return
        offset = batch[-1].offset + 1


def server_key(path: Path | None) -> Ed25519Verifier:
    if path is None:
        try:
            path = userconfig.load(None).server_key
        except ConfigError:
            path = None
        path = path or paths.keys_dir()
    path = path.expanduser()
    if path.is_dir():
        found = []
        for pub in sorted(path.glob("*.pub")):
            try:
                public = files.load_public(pub)
            except KeyFileError:
                continue
            if public.kind == "server":
                found.append(public)
        if len(found) != 1:
            raise MissingKeyFile(
                f"{path}: {'no' if not found else len(found)} server public keys there; "
                "name one with --key FILE"
            )
        public = found[0]
    else:
        public = files.load_public(path)
        if public.kind != "server":
            raise KeyFileError(f"{path} is a {public.kind} key, not the server's")
    return ed25519_verifier(public.ed25519_public)


def check_log(
    handle: OrderedLog, prefix: str, verifier: Ed25519Verifier, *, late_writes: bool = False
) -> Report:
    """``late_writes``: the log is on Kafka, whose brokers keep a deposed leader's late
    appends (``pushjobs.audit.verifier``)."""
    from pushjobs.audit.verifier import TopicRecords, verify

    names = std.names(prefix)
    infos = [i for i in handle.topics() if i.name.startswith(prefix)]
    skip = {names.control, names.audit}
    audited = [
        # ``pushjobs key`` writes the registry directly while no server runs: unchained.
        TopicRecords(
            i.name,
            i.policy.compacted,
            list(_records(handle, i.name)),
            outside_writers=i.name == names.keys,
            late_writes=late_writes,
        )
        for i in sorted(infos, key=lambda i: i.name)
        if i.name not in skip
    ]
    # A log from before the trail has no audit topic: no checkpoint, nothing sealed.
    checkpoints = (
        list(_records(handle, names.audit)) if names.audit in {i.name for i in infos} else []
    )
    audit = TopicRecords(names.audit, False, checkpoints)
    return verify(audited, audit, verifier)


def _report_json(report: Report) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "checkpoints": report.checkpoints,
        "first": None if report.first is None else _problem(report.first),
        "problems": [_problem(p) for p in report.problems],
        "starts": [
            {"topic": s.topic, "offset": s.offset, "stream": s.stream, "seq": s.seq}
            for s in report.starts
        ],
        "topics": {
            name: {
                "records": s.records,
                "chained": s.chained,
                "sealed": s.sealed,
                "unsealed": s.unsealed,
                "legacy": s.legacy,
                "outside": s.outside,
                "compacted_gaps": s.compacted_gaps,
                "streams": s.streams,
                "deposed": s.deposed,
            }
            for name, s in report.topics.items()
        },
    }


def _problem(p: Any) -> dict[str, Any]:
    return {"topic": p.topic, "offset": p.offset, "what": p.what, "detail": p.detail}


def _render(report: Report) -> None:
    for name, s in report.topics.items():
        if not s.records:
            continue
        extra = [
            f"{n} {what}"
            for n, what in (
                (s.legacy, "from before the trail"),
                (s.outside, "written outside the servers"),
                (s.compacted_gaps, "compaction gaps"),
                (s.unsealed, "not yet sealed"),
                (s.deposed, "late writes of a deposed leader"),
            )
            if n
        ]
        tail = f" ({', '.join(extra)})" if extra else ""
        typer.echo(f"{name}: {s.records} records, {s.chained} chained, {s.sealed} sealed{tail}")
    for start in report.starts:
        typer.echo(
            f"{start.topic}: chain of {start.stream} starts at offset {start.offset} "
            "(older records unchained)"
        )
    typer.echo(f"{report.checkpoints} signed checkpoints")
    if report.ok:
        typer.echo("OK: no record altered, missing or reordered")
        return
    first = report.problems[0]
    typer.echo(
        f"TAMPERED: {first.topic} offset {first.offset}: {first.what}: {first.detail}", err=True
    )
    if len(report.problems) > 1:
        typer.echo(
            f"({len(report.problems) - 1} more problems after it; --json lists them)", err=True
        )


@app.command("verify")
@handle_errors
def verify_command(
    *,
    key: KeyOpt = None,
    log: LogOpt = None,
    backend: BackendOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    prefix: PrefixOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check every chained record of the log and every signed checkpoint, offline.

    Names the first record that was altered, removed or reordered (topic, offset, what),
    or a checkpoint whose signature is not the server's, and exits 1; exits 0 if none.
    Records written since the last checkpoint are chained but not yet signed: they are
    counted as "not yet sealed".

    Examples:
      pushjobs audit verify --key /etc/pushjobs/keys/server.pub
      pushjobs audit verify --log /backup/log-copy.db --key server.pub --json
    """
    verifier = server_key(key)
    settings = log_settings(log, backend, bootstrap)
    with opened(log, backend, bootstrap) as handle:
        report = check_log(
            handle,
            prefix or settings.topic_prefix,
            verifier,
            late_writes=settings.backend == "kafka",
        )
    if as_json:
        print_json(_report_json(report))
    else:
        _render(report)
    if not report.ok:
        raise typer.Exit(int(Exit.FAILED))


def _when(ts: int | None) -> str:
    if ts is None:
        return "?"
    stamp = datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


@app.command("show")
@handle_errors
def show(
    job_id: Annotated[str, typer.Argument(help="The job's id.")],
    *,
    log: LogOpt = None,
    backend: BackendOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    prefix: PrefixOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Who asked for a job, who approved it, and what each node did: from the log alone.

    Reads the job's records on the events and commands topics (no server needed). Run
    "pushjobs audit verify" to know whether the log can be trusted.

    Examples:
      pushjobs audit show 7f3c2a
      pushjobs audit show 7f3c2a --log /backup/log-copy.db --json
    """
    from pushjobs.audit import story as stories

    names = std.names(prefix or log_settings(log, backend, bootstrap).topic_prefix)
    with opened(log, backend, bootstrap) as handle:
        told = stories.tell(
            job_id, _records(handle, names.commands), _records(handle, names.events)
        )
    if not told.found:
        typer.echo(f"no record of job {job_id} in the log", err=True)
        raise typer.Exit(int(Exit.NOT_FOUND))
    if as_json:
        print_json(told.to_json())
        return
    typer.echo(f"job {told.job_id}: {told.command}")
    typer.echo(f"  asked by {told.requested_by or '?'} at {_when(told.requested_ts)}")
    typer.echo(f"  state {told.state or '?'}")
    for step in told.steps:
        by = f" by {step.by}" if step.by else ""
        detail = f" ({step.detail})" if step.detail else ""
        typer.echo(f"  {_when(step.ts)}  {step.what}{by}{detail}")
    for node, steps in sorted(told.nodes.items()):
        last = steps[-1]
        status = f" exit {last.exit_status}" if last.exit_status is not None else ""
        reason = f" ({last.reason})" if last.reason else ""
        path = " -> ".join(s.state for s in steps)
        typer.echo(f"  node {node}: {path}{status}{reason}")
