"""Hostile input at full rate: what each server socket absorbs, and what it costs.

One real server (SQLite log), 3 real agents and a simulated fleet heartbeating (default
10,000 nodes); then, one after another, an attacker process sends one kind of hostile
input as fast as it can for a window (default 10 s):

    garbage-api      random frames to the API socket, from a stranger's CurveZMQ key
    garbage-reply    random frames to the reply socket, with an accepted node's key
    subscriptions    small subscriptions to the heartbeat socket, from 20 strangers' XSUBs
    subscriptions-node  the same with an accepted node key no agent uses (an insider's)
    enrolment        self-signed config requests from fresh identities
    enrolment-conns  the same over 50 connections at once from one source
    enrolment-500    the same over 500 connections (strangers over the per-source cap)
    impostors        config requests under a real node's name with fresh keys
    watches          job.watch requests from a reader, many client processes

For each: messages sent per second, messages the server counted (drops, refusals,
parked or refused watches) per second, the server's CPU % and RSS growth, the online
count at the end, false offline transitions (goal: 0), and whether a job on the 3 real
agents still completes afterwards. Goals from the issue: no node offline at the socket's
saturation rate; RSS growth under 50 MB for any unauthenticated input.

    python bench/hostile.py [--seconds 10] [--simulated 10000] [--only garbage-api,...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq
from machine import describe  # bench/ is sys.path[0] when run as a script

from keys import files
from keys.fingerprint import key_id, self_key_id
from keys.identity import b64, generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.api.client import ApiClient
from pushjobs.protocol.messages import ApiRequest, ConfigRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.states import TERMINAL_JOB_STATES
from pushjobs.testbed.sandbox import Sandbox

TICKS = os.sysconf("SC_CLK_TCK")
CONNECTIONS = {"enrolment-conns": 50, "enrolment-500": 500}
TERMINAL = {state.value for state in TERMINAL_JOB_STATES}
KINDS = (
    "garbage-api",
    "garbage-reply",
    "subscriptions",
    "subscriptions-node",
    "enrolment",
    "enrolment-conns",
    "enrolment-500",
    "impostors",
    "watches",
)


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _curve(sock: zmq.Socket[bytes], secret: str, public: str, server: str) -> None:
    sock.curve_secretkey = secret.encode()
    sock.curve_publickey = public.encode()
    sock.curve_serverkey = server.encode()


def attack(kind: str, root: str, endpoints: dict[str, str], seconds: float, job_id: str) -> int:
    """Send ``kind`` for ``seconds`` as fast as the socket takes it; how many were sent."""
    keys = Path(root) / "keys"
    server = files.load_public(keys / "server.pub").curve_public
    context = zmq.Context()
    stranger = generate("stranger", "user")
    sent = 0
    end = time.monotonic() + seconds
    try:
        if kind.startswith("subscriptions"):
            node = files.load_private(keys / "insider.key")
            socks = []
            for _ in range(20):
                sock = context.socket(zmq.XSUB)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, 0)
                if kind == "subscriptions-node":
                    _curve(sock, node.curve_secret, node.public.curve_public, server)
                sock.connect(endpoints["heartbeat"])
                socks.append(sock)
            while time.monotonic() < end:
                for _ in range(1000):
                    socks[sent % 20].send(b"\x01" + os.urandom(30))
                    sent += 1
            return sent
        if kind in CONNECTIONS:
            return _many(context, server, endpoints["api"], keys, end, CONNECTIONS[kind], job_id)
        sock = context.socket(zmq.PUSH if kind == "garbage-reply" else zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        if kind == "garbage-reply":
            node = files.load_private(keys / "node-1.key")
            _curve(sock, node.curve_secret, node.public.curve_public, server)
            sock.connect(endpoints["reply"])
        elif kind == "watches":
            user = files.load_private(keys / "admin.key")
            _curve(sock, user.curve_secret, user.public.curve_public, server)
            sock.connect(endpoints["api"])
        else:
            _curve(sock, stranger.curve_secret, stranger.public.curve_public, server)
            sock.connect(endpoints["api"])
        identities = [generate(f"spam-{n}", "node") for n in range(200)]
        while time.monotonic() < end:
            for _ in range(100):
                sock.send_multipart(_frames(kind, keys, identities, sent, job_id))
                sent += 1
            while sock.poll(0):  # replies: read and forget, or they pile up here
                sock.recv_multipart()
        return sent
    finally:
        context.destroy(linger=0)


def _many(
    context: zmq.Context[Any], server: str, api: str, keys: Path, end: float, n: int, job_id: str
) -> int:
    """Enrolment spam over ``n`` DEALERs, each a stranger's CurveZMQ key: what libzmq
    queues ahead of the loop is per connection, so this is the costlier attack."""
    socks = []
    for _ in range(n):
        stranger = generate("stranger", "user")
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        _curve(sock, stranger.curve_secret, stranger.public.curve_public, server)
        sock.connect(api)
        socks.append(sock)
    identities = [generate(f"spam-{n}", "node") for n in range(200)]
    sent = 0
    while time.monotonic() < end:
        for sock in socks:
            for _ in range(20):
                try:
                    sock.send_multipart(
                        _frames("enrolment", keys, identities, sent, job_id), zmq.NOBLOCK
                    )
                except zmq.Again:
                    break
                sent += 1
            while sock.poll(0):
                sock.recv_multipart()
    return sent


_OUTBOXES: dict[str, Outbox] = {}


def _frames(kind: str, keys: Path, identities: list[Any], n: int, job_id: str) -> list[bytes]:
    now_ms = time.time_ns() // 1_000_000
    if kind.startswith("garbage"):
        return [os.urandom(40), os.urandom(200), os.urandom(64)]
    if kind == "watches":
        client = f"spam{n // 50}"  # a new client process every 50 watches
        outbox = _OUTBOXES.get(client)
        if outbox is None:
            user = files.load_private(keys / "admin.key")
            signer = Ed25519Signer(key_id(user.public.ed25519_public), user.signing_key())
            outbox = _OUTBOXES.setdefault(client, Outbox("admin", client, signer))
        params = {"job_id": job_id, "version": 10**9, "wait_s": 30}
        return outbox.frames(
            ApiRequest, now_ms, request_id=str(n), method="job.watch", params=params
        )
    identity = identities[n % len(identities)]
    name = "node-1" if kind == "impostors" else f"spam-{n}"
    public = identity.public
    signer = Ed25519Signer(self_key_id(public.ed25519_public), identity.signing_key())
    return Outbox(name, secrets.token_hex(4), signer).frames(
        ConfigRequest,
        now_ms,
        command_endpoint="tcp://127.0.0.1:9",
        ed25519_public=b64(public.ed25519_public),
        curve_public=public.curve_public,
    )


def counted(info: dict[str, Any], kind: str) -> int:
    """What the server has counted of this kind of input so far."""
    if kind == "garbage-reply":
        return sum(info["drops"].get("reply", {}).values())
    if kind == "watches":
        return int(info["watches"]["parked"] + info["watches"]["refused"])
    if kind in ("enrolment", *CONNECTIONS, "impostors"):
        return sum(info["drops"].get("api", {}).values()) + int(info["enrolment"]["refused"])
    return sum(info["drops"].get("api", {}).values())


def run_job(client: ApiClient, nodes: list[str]) -> str:
    job = client.call("job.start", {"command": "true", "nodes": nodes})["job"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state: str = client.call("job.status", {"job_id": job["job_id"]})["job"]["state"]
        if state in TERMINAL:
            return state
        time.sleep(0.1)
    return "no end within 30 s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--simulated", type=int, default=10_000)
    parser.add_argument("--only", default=",".join(KINDS))
    args = parser.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    print(describe())
    print(f"hostile: 3 real agents + {args.simulated} simulated nodes, {args.seconds:g} s each")
    with tempfile.TemporaryDirectory(prefix="pushjobs-hostile-") as tmp:
        sandbox = Sandbox(Path(tmp) / "fleet", interval_s=1.0).prepare()
        with sandbox:
            insider = generate("insider", "node")  # accepted, and no agent of its own
            files.save(insider, sandbox.keys_dir)
            KeyRegistry(sandbox.registry_path).add(insider.public, state=KeyState.ACCEPTED)
            sandbox.start_server()
            sandbox.start_agents()
            if args.simulated:
                sandbox.start_simulator("sim", args.simulated)
            client = ApiClient.from_files(
                sandbox.api, sandbox.keys_dir / "server.pub", sandbox.keys_dir / "admin.key"
            )
            total = 3 + args.simulated
            deadline = time.monotonic() + 120
            while client.call("server.info")["nodes_online"] < total:
                if time.monotonic() > deadline:
                    raise SystemExit("the fleet did not come online within 120 s")
                time.sleep(0.5)
            job = client.call("job.start", {"command": "true", "nodes": sandbox.nodes})["job"]
            pid = sandbox.procs["server"].popen.pid
            endpoints = {"api": sandbox.api, "reply": sandbox.reply, "heartbeat": sandbox.heartbeat}
            header = (
                f"{'input':<18} {'sent/s':>9} {'counted/s':>10} {'cpu %':>6} "
                f"{'rss +MB':>8} {'online':>7} {'offline':>8}  job after"
            )
            print(header)
            for kind in kinds:
                before = client.call("server.info")
                rss0, cpu0, t0 = rss_mb(pid), cpu_s(pid), time.monotonic()
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    sent = pool.apply(
                        attack, (kind, str(sandbox.root), endpoints, args.seconds, job["job_id"])
                    )
                took = time.monotonic() - t0
                cpu = 100 * (cpu_s(pid) - cpu0) / took
                after = client.call("server.info")
                offline = after["transitions"]["offline"] - before["transitions"]["offline"]
                state = run_job(client, sandbox.nodes)
                print(
                    f"{kind:<18} {sent / took:>9.0f} "
                    f"{(counted(after, kind) - counted(before, kind)) / took:>10.0f} "
                    f"{cpu:>6.0f} {rss_mb(pid) - rss0:>8.1f} {after['nodes_online']:>7} "
                    f"{offline:>8}  {state}",
                    flush=True,
                )
            client.close()


if __name__ == "__main__":
    main()
