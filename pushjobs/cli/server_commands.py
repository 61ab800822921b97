"""``pushjobs server``: the server's own health, as an operator reads it at a glance.

``status`` renders ``server.info``: leadership, uptime, nodes and jobs by state, dropped
messages by socket and reason, heartbeat lag, log append latency and garbage collection
pauses. ``list`` renders ``server.list``: every server of the installation as the
``control`` topic knows it, its role, epoch, last pong, the schedule partitions it fires
and its endpoints. ``drain`` moves an edge's nodes to the other edges (``server.drain``).
``--json`` prints the reply as it came, every figure included.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer

from pushjobs.cli import userconfig
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.job_commands import ConfigOpt, JsonOpt, ServerOpt
from pushjobs.cli.render import handle_errors, print_json, printable, reading_reply

app = typer.Typer(help="The servers themselves: health, figures, who leads.", no_args_is_help=True)
LIST_COLUMNS = (
    "server",
    "role",
    "epoch",
    "last pong",
    "partitions",
    "api",
    "heartbeat",
    "reply",
)


def duration(seconds: float) -> str:
    """``3d 4h``, ``2h 03m``, ``5m 12s``, ``42s``: the two largest units."""
    s = int(seconds)
    days, hours, minutes = s // 86400, s // 3600 % 24, s // 60 % 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {s % 60:02d}s"
    return f"{s}s"


def _ms(value: float | None) -> str:
    # Two significant digits below 10 ms, whole milliseconds above: 0.7, 3.1, 42 ms.
    if value is None:
        return "-"
    return f"{value:.2g} ms" if value < 10 else f"{value:.0f} ms"


def _counts(counts: Mapping[str, int], order: list[str] | None = None) -> str:
    """``3 running, 120 complete``: the non-zero ones, in ``order``; ``none`` if all are 0."""
    names = order if order is not None else sorted(counts)
    shown = [f"{counts[n]:,} {n}" for n in names if counts.get(n)]
    return ", ".join(shown) or "none"


def lines(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) rows of the status block."""
    role = f"leader, epoch {info['epoch']}" if info.get("leader") else "standing by (not leader)"
    uptime = info.get("uptime_s")
    rows = [
        (
            "server",
            f"{info['server_id']} (incarnation {info['incarnation']}), {role}"
            + ("" if uptime is None else f", up {duration(uptime)}"),
        )
    ]
    nodes = info.get("nodes") or {"online": info.get("nodes_online", 0)}
    rows.append(("nodes", ", ".join(f"{n:,} {state}" for state, n in nodes.items())))
    if "jobs" in info:
        rows.append(("jobs", _counts(info["jobs"], list(info["jobs"]))))
    drops = [
        f"{socket}: {_counts(reasons)}"
        for socket, reasons in sorted(info.get("drops", {}).items())
        if any(reasons.values())
    ]
    rows.append(("drops", "; ".join(drops) or "none"))
    lag = info.get("heartbeat_lag")
    if lag is not None:
        rows.append(
            (
                "heartbeats",
                f"lag p50 {_ms(lag['p50_ms'])}, p99 {_ms(lag['p99_ms'])}, "
                f"max {_ms(lag['max_ms'])} ({info.get('heartbeats', 0):,} heartbeats)",
            )
        )
    reading = _reading(info)
    if reading:
        rows.append(("reading", reading))
    for edge in info.get("edges") or []:
        rows.append(("edge", _edge_line(edge)))
    outage = info.get("log_outage")
    if outage:
        rows.append(
            (
                "log",
                f"NOT WRITABLE for {duration(outage['for_s'])} ({outage['tries']} tries): "
                f"{outage['error']}",
            )
        )
    append = info.get("log_append")
    if append is not None:
        rows.append(
            (
                "log",
                f"append p50 {_ms(append['p50_ms'])}, p99 {_ms(append['p99_ms'])}, "
                f"max {_ms(append['max_ms'])} ({append['count']:,} appends, "
                f"{append['failures']:,} failed)",
            )
        )
    gc = info.get("gc")
    if gc:
        rows.append(
            (
                "gc",
                f"paused {_ms(round(sum(gc['pause_total_ms']), 1))} in total, longest "
                f"{_ms(max(gc['pause_max_ms']))} ({sum(gc['collections']):,} collections, "
                f"{gc['collections'][2]:,} full)",
            )
        )
    return rows


def _reading(info: Mapping[str, Any]) -> str:
    """Whether this server reads its nodes' messages as fast as they come (a server with
    edges reads theirs: see each edge's line); empty for one that always has."""
    deferred, stalls = info.get("expiry_deferred", 0), info.get("stalls", 0)
    since = f"offline checks put off {_times(deferred)}, stalled {_times(stalls)} since start"
    if info.get("backlog"):
        return f"BEHIND: messages waiting to be read; nobody is judged offline meanwhile ({since})"
    return f"keeping up now; {since}" if deferred or stalls else ""


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n:,} times"


def _edge_line(edge: Mapping[str, Any]) -> str:
    """One edge: whether it serves, its nodes, its heartbeat lag, and what it is behind
    on or dropped (an edge that cannot keep up says so here)."""
    own = edge.get("remote")  # a pushjobs-edge: it joined, and is not restarted here
    if edge.get("live"):
        state = "serving (an edge of its own)" if own else "serving"
        if edge.get("draining"):
            state += ", DRAINING (no node placed on it; its nodes moving off)"
    else:
        state = "NOT SERVING (lost: its nodes moved)" if own else "NOT SERVING (restarting)"
    # A lost edge's last figures are history: its nodes are elsewhere now.
    online, nodes = (edge.get("online", 0), edge.get("nodes", 0)) if edge.get("live") else (0, 0)
    text = (
        f"{edge['edge']} {state}, pid {edge.get('pid')}, {online:,} of "
        f"{nodes:,} nodes online, lag p99 {_ms(edge.get('lag_p99_ms'))}"
    )
    if edge.get("backlog"):
        text += ", BEHIND (heartbeats waiting to be read; nobody is judged meanwhile)"
    dropped = sum((edge.get("drops") or {}).values())
    if dropped:
        text += f", {dropped:,} messages dropped ({_counts(edge['drops'])})"
    if edge.get("losses"):
        text += f", lost {edge['losses']} times"
    return text


def render(info: Mapping[str, Any]) -> str:
    rows = lines(info)
    width = max(len(label) for label, _ in rows)
    # A server's id and a log error are other people's text: one line each, as they are.
    return "\n".join(f"{label:<{width}}  {printable(text)}" for label, text in rows)


@app.command("status")
@handle_errors
def status(config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False) -> None:
    """Leader, epoch, uptime, nodes and jobs by state, drops, heartbeat lag, each edge
    (its nodes, lag, backlog, drops), log append latency and GC pauses of the server.

    Example: pushjobs server status --json
    """
    with userconfig.connect(config, server) as client, reading_reply():
        info = client.call("server.info", {})
        if as_json:
            print_json(info)
        else:
            typer.echo(render(info))


def server_rows(servers: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """The ``server list`` table: one row per server, this one's name marked with ``*``."""
    rows: list[tuple[str, ...]] = []
    for row in servers:
        name = f"{row['name']}:{row['incarnation']}" + (" *" if row.get("self") else "")
        epoch = "-" if row.get("epoch") is None else str(row["epoch"])
        pong = f"{row['last_pong_ms_ago'] / 1000:.1f} s ago"
        share = shares(row.get("partitions"))
        if "serves" in row:
            # An edge of its own: its share is nodes, not schedules; whom it serves.
            share = edge_share(row)
            serves = row.get("serves") or "nobody yet"
            epoch = f"serves {serves}"
        rows.append(
            (
                name,
                row["role"],
                epoch,
                pong,
                share,
                row["api"] or "-",
                row["heartbeat"],
                row["reply"],
            )
        )
    return rows


def edge_share(row: Mapping[str, Any]) -> str:
    """An edge's share and load: ``3,316 nodes, 3.3k/s, p99 6 ms``; ``(own)`` for one its
    server started."""
    text = f"{row.get('nodes', 0):,} nodes"
    if row.get("nodes"):
        rate = float(row.get("rate") or 0.0)
        text += f", {rate / 1000:.1f}k/s" if rate >= 1000 else f", {rate:.0f}/s"
        text += f", p99 {_ms(row.get('lag_p99_ms') or 0.0)}"
    return text + (" (own)" if row.get("own") else "")


def partition_label(topic: str) -> str:
    """``pushjobs.schedules.3`` -> ``3``; the unnumbered topic of schedules written before
    partitions (``pushjobs.schedules``) -> ``old``."""
    suffix = topic.rpartition(".")[2]
    return suffix if suffix.isdigit() else "old"


def shares(partitions: Sequence[str] | None) -> str:
    """The schedule partitions a server fires: ``3: 0 2 5``; ``-`` for none (or a server of
    a version that does not say)."""
    if not partitions:
        return "-"
    labels = sorted(map(partition_label, partitions), key=lambda x: int(x) if x.isdigit() else -1)
    return f"{len(labels)}: " + " ".join(labels)


def render_list(servers: Sequence[Mapping[str, Any]]) -> str:
    if not servers:
        return "no server has written to the control topic yet"
    # Names and endpoints are what each server wrote to the control topic: written out.
    table = [LIST_COLUMNS, *(tuple(map(printable, row)) for row in server_rows(servers))]
    widths = [max(len(row[i]) for row in table) for i in range(len(LIST_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    )


@app.command("list")
@handle_errors
def list_servers(
    config: ConfigOpt = None, server: ServerOpt = None, as_json: JsonOpt = False
) -> None:
    """Every server of the installation: its role (leader, standby; deposed or gone when
    its record says a lease it no longer holds, or is stale), epoch, last pong, the
    schedule partitions it fires (how many: which) and endpoints. The server that
    answered is marked with *. Edges follow, role edge: the server they serve, their
    share (nodes, heartbeats read per second, their lag's p99; (own) for one the server
    started itself) and their endpoints.

    Example: pushjobs server list --json
    """
    with userconfig.connect(config, server) as client, reading_reply():
        servers = client.call("server.list", {})["servers"]
        if as_json:
            print_json(servers)
        else:
            typer.echo(render_list(servers))


DRAIN_POLL_S = 0.5


@app.command("drain")
@handle_errors
def drain(
    edge: Annotated[str, typer.Argument(help="The edge, as server status names it.")],
    undo: Annotated[
        bool, typer.Option("--undo", help="Place nodes on it again (end a drain).")
    ] = False,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Wait until no node online is served by it, showing progress."),
    ] = False,
    timeout_s: Annotated[
        float, typer.Option("--timeout", help="With --wait: give up after this many seconds.")
    ] = 300.0,
    config: ConfigOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move an edge's nodes to the other edges: no node is placed on it any more, and its
    nodes are asked to rediscover (again every 5 s while some stay). A node running a job
    keeps running it and reports through its new edge. Then stop an edge of its own (its
    service); one of the server's own stays, empty, until --undo or the server restarts.

    Exit codes: 0 drained (or asked, without --wait); 4 --timeout passed with nodes
    online left on it; 8 no such edge.

    Example: pushjobs server drain edge-b --wait
    """
    with userconfig.connect(config, server) as client, reading_reply():
        row = client.call("server.drain", {"edge": edge, "undo": undo})["edge"]
        if not wait or undo:
            if as_json:
                print_json(row)
            else:
                typer.echo(f"edge {printable(edge)}: {'placed on again' if undo else 'draining'}")
            return
        deadline = time.monotonic() + timeout_s
        shown = None
        while True:
            rows = {r["edge"]: r for r in client.call("server.info", {}).get("edges") or []}
            row = rows.get(edge, row)
            left = row.get("online", 0) if row.get("live") else 0
            if left == 0 or time.monotonic() >= deadline:
                break
            if left != shown and not as_json:
                typer.echo(f"edge {printable(edge)}: {left:,} nodes online left", err=True)
                shown = left
            time.sleep(DRAIN_POLL_S)
        if as_json:
            print_json(row)
        else:
            said = "drained" if left == 0 else f"{left:,} nodes online on it after {timeout_s:g} s"
            typer.echo(f"edge {printable(edge)}: {said}")
        if left:
            raise typer.Exit(int(Exit.TIMED_OUT))
