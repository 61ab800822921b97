"""``pushjobs log``: look into the ordered log (topics, tail, compact, stats).

These commands open the log directly (the sqlite file, or a Kafka cluster), not through
the server: they work while the server is down, which is when an operator needs them.
Which log: ``--log``/``--backend`` when given, else ``$PUSHJOBS_LOG``, else the ``[log]`` of
the server's own config (``/etc/pushjobs/server.toml``, moved by ``$PUSHJOBS_CONFIG_DIR``)
when it exists, else ``$PUSHJOBS_HOME/log.db``: on the server's host, the server's log.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from pushjobs import paths
from pushjobs.cli.render import handle_errors, print_json, table
from pushjobs.config import load_table
from pushjobs.log import topics as std
from pushjobs.log.base import GroupInfo, ListsGroups, OrderedLog, Record, TopicInfo
from pushjobs.log.factory import LogSettings, open_log

app = typer.Typer(
    help="Inspect and maintain the ordered log: topics, tail, compact, stats.",
    no_args_is_help=True,
)

LogOpt = Annotated[
    Path | None,
    typer.Option(
        "--log",
        help="The sqlite log file (default: $PUSHJOBS_LOG, else the \\[log] of "
        "/etc/pushjobs/server.toml when it exists, else $PUSHJOBS_HOME/log.db).",
        show_default=False,
    ),
]
BackendOpt = Annotated[
    str | None, typer.Option("--backend", help="sqlite or kafka (default: sqlite).")
]
BootstrapOpt = Annotated[
    str, typer.Option("--bootstrap", help="Kafka bootstrap servers (with --backend kafka).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

TOPIC_COLUMNS = ("topic", "policy", "records", "bytes", "start", "end")
READ_CHUNK = 1000


def log_settings(log: Path | None, backend: str | None, bootstrap: str) -> LogSettings:
    """The log these options name (see the module docstring), never created."""
    # create=False: inspecting a mistyped path must say so, not create an empty log there.
    if log is None and backend is None and not os.environ.get("PUSHJOBS_LOG"):
        server_config = paths.default_config("server.toml")
        if server_config is not None:
            return replace(load_table(LogSettings, server_config, "log"), create=False)
    return LogSettings(
        backend=backend or "sqlite", path=log, bootstrap_servers=bootstrap, create=False
    )


@contextlib.contextmanager
def opened(log: Path | None, backend: str | None, bootstrap: str) -> Iterator[OrderedLog]:
    handle = open_log(log_settings(log, backend, bootstrap))
    try:
        yield handle
    finally:
        handle.close()


def _policy(info: TopicInfo) -> str:
    parts = ["compacted" if info.policy.compacted else "append-only"]
    if info.policy.retention_ms is not None:
        parts.append(f"retention {info.policy.retention_ms / 1000:g}s")
    if info.policy.retention_bytes is not None:
        parts.append(f"retention {info.policy.retention_bytes}B")
    return ", ".join(parts)


def _topic_row(info: TopicInfo) -> dict[str, Any]:
    return {
        "topic": info.name,
        "policy": _policy(info),
        "compacted": info.policy.compacted,
        "retention_ms": info.policy.retention_ms,
        "retention_bytes": info.policy.retention_bytes,
        "records": info.records,
        "bytes": info.bytes,
        "start": info.start_offset,
        "end": info.end_offset,
    }


def _record_json(rec: Record) -> dict[str, Any]:
    row: dict[str, Any] = {
        "offset": rec.offset,
        "timestamp_ms": rec.timestamp_ms,
        "key": rec.key,
        "epoch": rec.epoch,
    }
    if rec.value is None:
        row.update(value=None, tombstone=True)
        return row
    try:
        row["value"] = orjson.loads(rec.value)
    except orjson.JSONDecodeError:
        row["value_repr"] = repr(rec.value)
    return row


def _record_line(rec: Record) -> str:
    when = datetime.fromtimestamp(rec.timestamp_ms / 1000, tz=UTC)
    stamp = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if rec.value is None:
        shown = "<tombstone>"
    else:
        try:
            shown = orjson.dumps(orjson.loads(rec.value)).decode()
        except orjson.JSONDecodeError:
            shown = repr(rec.value)
    epoch = f"  epoch={rec.epoch}" if rec.epoch else ""
    return f"{rec.offset}  {stamp}  {rec.key}  {shown}{epoch}"


def _resolve(handle: OrderedLog, topic: str) -> str:
    return std.resolve(topic, {info.name for info in handle.topics()})


@app.command("topics")
@handle_errors
def list_topics(
    log: LogOpt = None,
    backend: BackendOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    as_json: JsonOpt = False,
) -> None:
    """List topics with their policy, record count, size and offsets.

    Example: pushjobs log topics --log /var/lib/pushjobs/log.db
    """
    with opened(log, backend, bootstrap) as handle:
        rows = [_topic_row(info) for info in handle.topics()]
    if as_json:
        print_json(rows)
    elif rows:
        typer.echo(table(rows, TOPIC_COLUMNS))
    else:
        typer.echo("no topics")


@app.command("tail")
@handle_errors
def tail(
    topic: Annotated[
        str, typer.Argument(help="A topic: full name, or a standard one (events, commands...).")
    ],
    *,
    from_offset: Annotated[
        int | None,
        typer.Option("--from", help="Start at this offset (default: the last --limit offsets)."),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=0, help="Without --from: the last N offsets; with it: at most N records."
        ),
    ] = 20,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new records until Ctrl-C.")
    ] = False,
    interval_s: Annotated[
        float, typer.Option("--interval", min=0.01, help="Seconds between polls with --follow.")
    ] = 0.5,
    log: LogOpt = None,
    backend: BackendOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    as_json: JsonOpt = False,
) -> None:
    """Print a topic's records: offset, time, key, value (JSON when it parses, else repr).

    --follow prints every record from the start on, then new ones until Ctrl-C.
    --json prints one JSON object per line.

    Examples:
      pushjobs log tail events
      pushjobs log tail pushjobs.assignments --from 0 --limit 100
      pushjobs log tail events --follow --json | jq .value
    """
    with opened(log, backend, bootstrap) as handle:
        name = _resolve(handle, topic)
        start = from_offset
        if start is None:
            start = max(0, handle.end_offset(name) - limit)
        show = _record_json_line if as_json else _record_line
        if follow:
            with contextlib.suppress(KeyboardInterrupt):
                _follow(handle, name, start, interval_s, show)
        else:
            _print_records(handle, name, start, limit, show)


def _record_json_line(rec: Record) -> str:
    return orjson.dumps(_record_json(rec)).decode()


def _print_records(
    handle: OrderedLog, topic: str, start: int, limit: int, show: Callable[[Record], str]
) -> None:
    remaining = limit
    while remaining > 0:
        records = handle.read(topic, start, limit=min(remaining, READ_CHUNK))
        if not records:
            return
        for rec in records:
            typer.echo(show(rec))
        remaining -= len(records)
        start = records[-1].offset + 1


def _follow(
    handle: OrderedLog, topic: str, start: int, interval_s: float, show: Callable[[Record], str]
) -> None:
    while True:
        records = handle.read(topic, start, limit=READ_CHUNK)
        for rec in records:
            typer.echo(show(rec))
        if records:
            start = records[-1].offset + 1
        else:
            time.sleep(interval_s)


@app.command("compact")
@handle_errors
def compact(
    topics: Annotated[
        list[str] | None, typer.Argument(help="Topics to compact (default: all).")
    ] = None,
    log: LogOpt = None,
    backend: BackendOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    as_json: JsonOpt = False,
) -> None:
    """Apply compaction and retention now (compacted topics keep each key's latest record).

    Safe while the server runs. On Kafka it only reports: the brokers compact on their own.

    Examples:
      pushjobs log compact
      pushjobs log compact assignments commands --json
    """
    with opened(log, backend, bootstrap) as handle:
        names = [_resolve(handle, t) for t in topics] if topics else None
        stats = handle.compact(names)
    rows = [
        {
            "topic": s.topic,
            "before": s.records_before,
            "after": s.records_after,
            "removed": s.records_before - s.records_after,
            "seconds": round(s.seconds, 3),
        }
        for s in stats
    ]
    if as_json:
        print_json(rows)
    elif rows:
        typer.echo(table(rows, ("topic", "before", "after", "removed", "seconds")))
    else:
        typer.echo("no topics")


@app.command("stats")
@handle_errors
def stats(
    groups: Annotated[
        list[str] | None,
        typer.Option("--group", help="Report this consumer group (repeatable; needed on Kafka)."),
    ] = None,
    log: LogOpt = None,
    backend: BackendOpt = None,
    bootstrap: BootstrapOpt = "localhost:9092",
    as_json: JsonOpt = False,
) -> None:
    """Records, bytes and offsets per topic; committed offset and lag per consumer group.

    Lag is end offset minus committed offset: records the group has yet to consume.

    Examples:
      pushjobs log stats
      pushjobs log stats --backend kafka --bootstrap kafka1:9092 --group leaders
    """
    with opened(log, backend, bootstrap) as handle:
        infos = handle.topics()
        group_rows = _group_rows(handle, infos, groups or [])
    topic_rows = [_topic_row(info) for info in infos]
    if as_json:
        print_json({"topics": topic_rows, "groups": group_rows})
        return
    typer.echo(table(topic_rows, TOPIC_COLUMNS) if topic_rows else "no topics")
    typer.echo("")
    if group_rows:
        typer.echo(
            table(group_rows, ("group", "topic", "committed", "end", "lag", "owner", "epoch"))
        )
    else:
        typer.echo("no consumer groups")


def _group_rows(
    handle: OrderedLog, infos: list[TopicInfo], wanted: list[str]
) -> list[dict[str, Any]]:
    ends = {info.name: info.end_offset for info in infos}
    groups = handle.groups() if isinstance(handle, ListsGroups) else []
    known = {(g.group, g.topic) for g in groups}
    for group in wanted:  # a backend that cannot list groups is asked topic by topic
        for name in ends:
            committed = None if (group, name) in known else handle.committed(group, name)
            if committed is not None:
                groups.append(GroupInfo(group, name, committed))
    rows = []
    for g in sorted(groups, key=lambda g: (g.group, g.topic)):
        if wanted and g.group not in wanted:
            continue
        end = ends.get(g.topic, 0)
        rows.append(
            {
                "group": g.group,
                "topic": g.topic,
                "committed": g.committed,
                "end": end,
                "lag": None if g.committed is None else end - g.committed,
                "owner": g.owner,
                "epoch": g.epoch,
            }
        )
    return rows
