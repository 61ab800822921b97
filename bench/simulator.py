"""What one simulated heartbeat and one simulated reply cost the fleet simulator.

    python bench/simulator.py [--nodes 100000] [--rounds 4] [--plain]

The server is measured against simulated fleets on the same small host, so whatever the
simulator spends is taken from the server. This prints, per heartbeat and per reply, the
simulator's cost on three paths, measured in the same run in alternating rounds (best
round each, so background load hits all of them alike):

- ``old``: the simulator as it was before this benchmark (kept below, verbatim): a dict
  orjson-dumped and HMAC-signed per heartbeat, one ``send_multipart`` each; a reply built
  as a message object and sealed by the outbox;
- ``new``: ``SimNode`` and ``FanOut`` as they are now;
- ``sim`` for commands: the simulator's intake of a job's commit and run (its inbox:
  signature, decode, replay window; then the node's runner), unchanged here;
- floors, the raw work on prebuilt bytes: ``hmac`` is one ``hmac.digest`` of the signed
  bytes (what a signer without precomputation pays); ``tag`` the HMAC of only what
  follows the sequence number, from precomputed states (``PrefixedHmac``: what signing a
  heartbeat cannot avoid); ``tag+send`` that and the three prebuilt frames sent with the
  cheapest calls pyzmq has (what a heartbeat on the wire cannot avoid).

First the frames alone (pure: no socket), then the send over one heartbeat interval:
``FanOut.heartbeats`` called as the simulator's loop calls it (every ``MIN_TURN_S`` of
simulated time) against a PUSH to a PULL drained by a child process, over CurveZMQ as the
simulator's real link is (``--plain`` for bare TCP). CPU is counted two ways: the sending
thread alone (Python, signing, libzmq's send call) and the whole process (plus libzmq's
I/O thread: CurveZMQ encryption and the TCP writes), until the child has received the
last message, so nothing the I/O thread still owed is left out. Heartbeats per second per
core is one second over the whole process's CPU per heartbeat.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import multiprocessing
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

import orjson
import zmq
from machine import describe  # bench/ is sys.path[0] when run as a script

from agent.runner import RunnerState
from agent.simulator.simfanout import FIRST, LAST, FanOut
from agent.simulator.simfleet import MIN_TURN_S, PUSH_HWM
from agent.simulator.simnode import Behaviour, SimNode, Stamp
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import seal
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.signing import HmacSigner, HmacVerifier, PrefixedHmac

INTERVAL_S = 1.0
ENDPOINT = "tcp://127.0.0.1:45678"
END = b"END"


# --- the old path, verbatim from before this benchmark (the baseline) ---------------------


def old_heartbeat_frames(node: SimNode, endpoint: str, now_ms: int) -> list[bytes]:
    out, signer = node.outbox, node.signer
    assert out is not None and signer is not None
    out.sequence += 1
    runner = node.runner
    body = orjson.dumps(
        {
            "type": "node_heartbeat",
            "sender": node.name,
            "incarnation": node.incarnation,
            "sequence": out.sequence,
            "timestamp": now_ms,
            "command_endpoint": endpoint,
            "job_id": runner.job_id,
            "job_state": None if runner.state is RunnerState.IDLE else runner.state.value,
        }
    )
    header = node.header
    return [header, body, signer.sign(header + b"\n" + body)]


def old_heartbeats(
    fan: FanOut, push: zmq.Socket[bytes], now: float, now_ms: int, interval_s: float
) -> None:
    nodes = fan.nodes
    count = len(nodes)
    due = int((now - fan.beat_origin) / interval_s * count)
    cursor = fan.beat_cursor
    if due - cursor > count:
        cursor = due - count
    if due <= cursor:
        return
    fan.beat_cursor = due
    endpoint = fan.endpoint
    sent = dropped = 0
    for i in range(cursor, due):
        node = nodes[i % count]
        if node.silent or node.outbox is None:
            continue
        try:
            push.send_multipart(old_heartbeat_frames(node, endpoint, now_ms), zmq.NOBLOCK)
            sent += 1
        except zmq.Again:
            dropped += 1
    fan.counters["heartbeats_sent"] += sent
    if dropped:
        fan.counters["heartbeats_dropped"] += dropped


def old_flush(fan: FanOut, push: zmq.Socket[bytes], now_ms: int) -> None:
    while fan.replies:
        node, _, cls, fields = fan.replies.popleft()
        assert node.outbox is not None
        frames = node.outbox.frames(cls, now_ms, **fields)
        push.send_multipart(frames, zmq.NOBLOCK)
        fan.counters["replies_sent"] += 1


# --- the fleet --------------------------------------------------------------------------------


def fleet(count: int) -> list[SimNode]:
    nodes = [SimNode(i, f"sim-{i:06d}") for i in range(count)]
    for node in nodes:
        key = hashlib.sha256(node.name.encode()).digest()
        node.configure(f"sk-{node.index:06d}-{key[:6].hex()}", key, 1e12)
    return nodes


REPLIES: tuple[tuple[type[m.Message], dict[str, Any]], ...] = (
    (m.AckCommit, {"job_id": "job-0123456789abcdef"}),
    (m.AckRun, {"job_id": "job-0123456789abcdef"}),
    (
        m.Succeeded,
        {"exit_status": 0, "output": None, "job_id": "job-0123456789abcdef", "duration_ms": 12},
    ),
)


def queue_replies(fan: FanOut, nodes: Sequence[SimNode]) -> int:
    for cls, fields in REPLIES:
        for node in nodes:
            fan.reply(node, node.incarnation, cls, dict(fields))
    return len(REPLIES) * len(nodes)


class Prebuilt:
    """One node's heartbeat, built once: the floors sign and send these bytes as they are."""

    __slots__ = ("data", "frames", "key", "mac", "rest")

    def __init__(self, node: SimNode, now_ms: int) -> None:
        self.frames = old_heartbeat_frames(node, ENDPOINT, now_ms)
        self.key = hashlib.sha256(node.name.encode()).digest()
        self.data = self.frames[0] + b"\n" + self.frames[1]
        cut = self.data.index(b'"sequence":') + len(b'"sequence":')
        self.mac = PrefixedHmac(self.key, self.data[:cut])
        self.rest = self.data[cut:]


def prebuilt(nodes: Sequence[SimNode]) -> list[Prebuilt]:
    now_ms = time.time_ns() // 1_000_000
    return [Prebuilt(node, now_ms) for node in nodes]


# --- the receiving end --------------------------------------------------------------------------


def drain(conn: Connection, curve: tuple[bytes, bytes] | None, hwm: int) -> None:
    """A child process: a PULL that counts messages, answering the count at each END."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, hwm)
    pull.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        pull.curve_secretkey, pull.curve_publickey = curve[1], curve[0]
        pull.curve_server = True
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    conn.send(port)
    received = 0
    recv = pull.recv_multipart
    while True:
        frames = recv()
        if frames == [END]:
            conn.send(received)
            received = 0
            continue
        if frames == [b"QUIT"]:
            break
        received += 1
    ctx.destroy(linger=0)


class Link:
    """The simulator's PUSH and the child's PULL; ``sync`` waits until all sent arrived."""

    def __init__(self, curve: bool, hwm: int) -> None:
        server = zmq.curve_keypair() if curve else None
        fork = multiprocessing.get_context("fork")  # before this process has a zmq context
        self.conn, child = fork.Pipe()
        self.proc = fork.Process(target=drain, args=(child, server, hwm), daemon=True)
        self.proc.start()
        port = self.conn.recv()
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, hwm)
        self.push.setsockopt(zmq.LINGER, 0)
        if server is not None:
            public, secret = zmq.curve_keypair()
            self.push.curve_secretkey, self.push.curve_publickey = secret, public
            self.push.curve_serverkey = server[0]
        self.push.connect(f"tcp://127.0.0.1:{port}")
        self.sync()

    def sync(self) -> int:
        self.push.send(END)
        received: int = self.conn.recv()
        return received

    def close(self) -> None:
        self.push.send(b"QUIT")
        self.proc.join(5)
        self.ctx.destroy(linger=0)


# --- measuring ---------------------------------------------------------------------------


class Best:
    """The best (least disturbed) round of each path: µs per item, thread and process CPU."""

    def __init__(self) -> None:
        self.thread: dict[str, float] = {}
        self.process: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    def time(self, name: str, items: int, run: Callable[[], None]) -> None:
        wall, cpu, proc = time.perf_counter(), time.thread_time(), time.process_time()
        run()
        figures = (
            (self.thread, time.thread_time() - cpu),
            (self.process, time.process_time() - proc),
            (self.wall, time.perf_counter() - wall),
        )
        for table, took in figures:
            us = took / items * 1e6
            table[name] = min(table.get(name, us), us)


def frames_alone(nodes: list[SimNode], rounds: int) -> Best:
    best = Best()
    now_ms = time.time_ns() // 1_000_000
    floor = prebuilt(nodes)

    def old() -> None:
        for node in nodes:
            old_heartbeat_frames(node, ENDPOINT, now_ms)

    def new() -> None:  # as FanOut.heartbeats builds them: one stamp for the batch
        stamp = Stamp(ENDPOINT, now_ms)
        for node in nodes:
            node.beat(stamp)

    def raw_hmac() -> None:
        digest = hmac.digest
        for beat in floor:
            digest(beat.key, beat.data, "sha256")

    def raw_tag() -> None:
        for beat in floor:
            beat.mac.tag(beat.rest)

    paths = (("old", old), ("new", new), ("hmac", raw_hmac), ("tag", raw_tag))
    for _ in range(rounds):
        for name, run in paths:
            best.time(name, len(nodes), run)
    return best


def sending(nodes: list[SimNode], link: Link, rounds: int) -> tuple[Best, Counter[str]]:
    """One interval of heartbeats through each path, as the loop sends them."""
    best = Best()
    counters: Counter[str] = Counter()
    push = link.push
    floor = prebuilt(nodes)

    def interval(send: Callable[[FanOut, float, int], None]) -> Callable[[], None]:
        def run() -> None:
            fan = FanOut(nodes, ENDPOINT, 0.0, counters)
            now, now_ms = 0.0, time.time_ns() // 1_000_000
            while fan.beat_cursor < len(nodes):
                now += MIN_TURN_S
                send(fan, now, now_ms + round(now * 1000))
            received = link.sync()
            counters["received"] += received

        return run

    def old(fan: FanOut, now: float, now_ms: int) -> None:
        old_heartbeats(fan, push, now, now_ms, INTERVAL_S)

    def new(fan: FanOut, now: float, now_ms: int) -> None:
        fan.heartbeats(push, now, now_ms, INTERVAL_S, server_online=True)

    def raw() -> None:
        send = zmq.backend.Socket.send
        for beat in floor:
            beat.mac.tag(beat.rest)
            header, body, signature = beat.frames
            send(push, header, FIRST)
            send(push, body, FIRST)
            send(push, signature, LAST)
        counters["received"] += link.sync()

    paths = (("old", interval(old)), ("new", interval(new)), ("tag+send", raw))
    for _ in range(rounds):
        for name, run in paths:
            best.time(name, len(nodes), run)
    return best, counters


def replies(nodes: list[SimNode], link: Link, rounds: int) -> tuple[Best, Counter[str]]:
    best = Best()
    counters: Counter[str] = Counter()
    push = link.push

    def run(path: str) -> Callable[[], None]:
        fan = FanOut(nodes, ENDPOINT, 0.0, counters)
        queue_replies(fan, nodes)

        def go() -> None:
            now_ms = time.time_ns() // 1_000_000
            if path == "old":
                old_flush(fan, push, now_ms)
            else:
                while fan.replies:
                    fan.flush(push, now_ms)
            counters["received"] += link.sync()

        return go

    per_round = len(REPLIES) * len(nodes)
    for _ in range(rounds):
        for name in ("old", "new"):
            best.time(name, per_round, run(name))  # queued outside the timed region
    return best, counters


def commands(nodes: list[SimNode], rounds: int) -> Best:
    """A job's commands as the simulator takes them: verified and replay-checked by its
    inbox, then judged by the node (``Simulator._on_command`` without the sockets)."""
    best = Best()
    now_ms = time.time_ns() // 1_000_000
    server = "server-1"
    keys = {f"k{node.index}": hashlib.sha256(node.name.encode()).digest() for node in nodes}
    verifiers = {kid: HmacVerifier(key, owner=server) for kid, key in keys.items()}
    rng, how = random.Random(1), Behaviour()

    def signed(round_: int) -> list[tuple[SimNode, list[bytes], list[bytes]]]:
        out = []
        job_id = f"job-{round_:04d}-0123456789abcdef"
        for node in nodes:
            signer = HmacSigner(f"k{node.index}", keys[f"k{node.index}"])
            envelope: dict[str, Any] = {"sender": server, "incarnation": "si", "timestamp": now_ms}
            seq = 2 * (round_ * len(nodes) + node.index)
            commit = m.Commit(
                **envelope, sequence=seq + 1, node=node.name, job_id=job_id, command="true"
            )
            run = m.Run(**envelope, sequence=seq + 2, node=node.name, job_id=job_id)
            out.append((node, seal(commit, signer), seal(run, signer)))
        return out

    def take(batch: list[tuple[SimNode, list[bytes], list[bytes]]], inbox: Inbox) -> None:
        for node, commit_frames, run_frames in batch:
            got = inbox.accept(commit_frames, now_ms)
            assert got is not None and isinstance(got.message, m.Commit), inbox.last_error
            node.on_commit(got.message, rng, how, 0.0)
            got = inbox.accept(run_frames, now_ms)
            assert got is not None and isinstance(got.message, m.Run), inbox.last_error
            node.on_run(got.message, how, 0.0)
            node.finish(got.message.job_id, rng, how, 0.0)

    def floor(batch: list[tuple[SimNode, list[bytes], list[bytes]]]) -> None:
        for node, commit_frames, run_frames in batch:
            for header, body, signature in (commit_frames, run_frames):
                key = keys[f"k{node.index}"]
                hmac.compare_digest(hmac.digest(key, header + b"\n" + body, "sha256"), signature)
                orjson.loads(body)

    inbox = Inbox(lambda method, kid: verifiers[kid], 30.0)
    for round_ in range(rounds):
        batch = signed(round_)  # signed outside the timed region
        best.time("sim", 2 * len(nodes), partial(take, batch, inbox))
        best.time("floor", 2 * len(nodes), partial(floor, batch))
    return best


def show(title: str, best: Best, names: Sequence[str]) -> None:
    print(f"\n{title}")
    print(f"  {'path':<10} {'thread µs':>10} {'process µs':>11} {'wall µs':>9} {'per core/s':>11}")
    for name in names:
        proc = best.process[name]
        rate = 1e6 / proc if proc > 0 else float("inf")
        print(
            f"  {name:<10} {best.thread[name]:>10.2f} {proc:>11.2f} {best.wall[name]:>9.2f} "
            f"{rate:>11,.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds, best kept")
    parser.add_argument("--plain", action="store_true", help="bare TCP instead of CurveZMQ")
    args = parser.parse_args()
    print(describe())
    print(
        f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}, orjson {orjson.__version__}; "
        f"{args.nodes:,} nodes, {args.rounds} rounds, "
        f"{'bare TCP' if args.plain else 'CurveZMQ'}, pid {os.getpid()}"
    )
    hwm = max(PUSH_HWM, 4 * args.nodes)  # the benchmark measures cost, never drops
    link = Link(curve=not args.plain, hwm=hwm)
    try:
        nodes = fleet(args.nodes)
        best = frames_alone(nodes, args.rounds)
        show("heartbeat frames alone (pure), per heartbeat", best, ("old", "new", "hmac", "tag"))
        best, counters = sending(nodes, link, args.rounds)
        show(
            "heartbeats sent over one interval (FanOut.heartbeats), per heartbeat",
            best,
            ("old", "new", "tag+send"),
        )
        sent = 3 * args.rounds * args.nodes
        dropped = counters["heartbeats_dropped"]
        print(f"  received {counters['received']:,} of {sent:,}; dropped {dropped:,}")
        best, counters = replies(nodes, link, args.rounds)
        show("replies (ack_commit, ack_run, succeeded) flushed, per reply", best, ("old", "new"))
        sent = 2 * args.rounds * len(REPLIES) * args.nodes
        print(f"  received {counters['received']:,} of {sent:,}")
        best = commands(nodes[: args.nodes // 5], args.rounds)
        show("commands (commit, run) verified and judged, per command", best, ("sim", "floor"))
    finally:
        link.close()


if __name__ == "__main__":
    main()
