"""What the CLI meets from others: control characters in text it prints (a command
name, a node's facts), a broken client config, a server that answers with something else,
and the server's own key used out of order on an agent's command socket. The CLI says one
line instead of a traceback, and no one forges a row in another operator's table.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.agentd import now_ms
from keys import files
from keys.fingerprint import key_id
from keys.identity import generate
from pushjobs.errors import ApiError
from pushjobs.protocol import messages as m
from pushjobs.protocol.codec import decode
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.testbed.sandbox import Sandbox
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint
from tests.agent import test_command_channel as command_channel
from tests.agent.test_command_channel import Channel, commit, replies, session_outbox
from tests.e2e.attacks.support import (
    job_done,
)
from tests.e2e.conftest import Fleet
from tests.e2e.conftest import run_cli as cli

pytestmark = pytest.mark.e2e


# --- control characters in a command name ---------------------------------------


def test_a_command_name_cannot_forge_rows_in_job_list(fleet: Fleet) -> None:
    forged = "FORGED-ROW  deploy  complete  1  1 succeeded"
    try:
        job = fleet.start(f"true\n{forged}", nodes=["node-1"])
        job_done(fleet, job["job_id"])
    except ApiError as exc:
        assert exc.code == "bad_request", exc  # refused up front: one good outcome
        return
    code, out, err = cli(fleet.sandbox.client_config_path, "job", "list")
    assert code == 0, err
    assert not any(line.startswith("FORGED-ROW") for line in out.splitlines()), out


def test_a_nodes_facts_cannot_forge_rows_in_node_list(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path, nodes=["node-1"]).prepare()
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        config = tmp_path / "agents" / "node-1.toml"
        forged = "FORGED-ROW  online  accepted"
        config.write_text(config.read_text() + f'\n[facts]\nrole = "web\\n{forged}"\n')
        sandbox.start_agents()
        fleet.wait_online()
        code, out, err = cli(sandbox.client_config_path, "node", "list")
        assert code == 0, err
        assert not any(line.startswith("FORGED-ROW") for line in out.splitlines()), out
    finally:
        fleet.close()


# --- a broken client config -------------------------------------------


def test_an_infinite_client_timeout_is_a_config_error(tmp_path: Path) -> None:
    config = _client_config(tmp_path, timeout="inf")
    code, _, err = cli(config, "job", "list")
    assert "Traceback" not in err, err
    assert code == 9 and "timeout_s" in err, err


def _client_config(
    tmp_path: Path,
    *,
    server: str = "tcp://127.0.0.1:9",
    server_key: Path | None = None,
    user_key: Path | None = None,
    timeout: str = "2.0",
) -> Path:
    if server_key is None:
        files.save(generate("server", "server"), tmp_path, force=True)
    if user_key is None:
        files.save(generate("alice", "user"), tmp_path, force=True)
    path = tmp_path / "client.toml"
    path.write_text(
        "[client]\n"
        f'server = "{server}"\n'
        f'server_key = "{server_key or tmp_path / "server.pub"}"\n'
        f'user_key = "{user_key or tmp_path / "alice.key"}"\n'
        f"timeout_s = {timeout}\n"
    )
    return path


@pytest.mark.parametrize(
    ("breakage", "said"),
    [
        ("toml", "invalid TOML"),
        ("type", "client.server"),
        ("binary", "not UTF-8"),
        ("key-mode", "chmod 600"),
        ("key-garbage", "not a pushjobs key file"),
        ("key-dir", "not a regular file"),
        ("timeout", "timeout_s"),
    ],
)
def test_a_broken_client_config_is_one_line_not_a_traceback(
    tmp_path: Path, breakage: str, said: str
) -> None:
    config = _client_config(tmp_path)
    if breakage == "toml":
        config.write_text("[client\nserver = 'x'\n")
    elif breakage == "type":
        config.write_text(config.read_text().replace('"tcp://127.0.0.1:9"', "5"))
    elif breakage == "binary":
        config.write_bytes(b"\xff\xfe\x00[client]")
    elif breakage == "key-mode":
        (tmp_path / "alice.key").chmod(0o644)
    elif breakage == "key-garbage":
        (tmp_path / "alice.key").write_bytes(os.urandom(64))
    elif breakage == "key-dir":
        (tmp_path / "alice.key").unlink()
        (tmp_path / "alice.key").mkdir()
    elif breakage == "timeout":
        config.write_text(config.read_text().replace("timeout_s = 2.0", "timeout_s = -1"))
    code, out, err = cli(config, "job", "list")
    assert "Traceback" not in err, err
    assert code in (9, 10), (code, err)
    assert err.startswith("error: ") and said in err, err
    assert out == ""


# --- a server that answers with something else ------------------------


class FakeServer:
    """A CurveZMQ server with its own key that answers every API request with ``answer``:
    what a server of another version, or a broken one, would send."""

    def __init__(self, root: Path, answer: Any) -> None:
        self.identity = generate("server", "server")
        files.save(self.identity, root, force=True)
        signer = Ed25519Signer(
            key_id(self.identity.public.ed25519_public), self.identity.signing_key()
        )
        self.outbox = Outbox("server", "fake0000", signer, Limits(max_body_bytes=64 * 1024**2))
        self.answer = answer
        self.transport = Transport(max_message_bytes=1024 * 1024)
        curve = CurveKeys(self.identity.public.curve_public, self.identity.curve_secret)
        self.sock = self.transport.socket("router", bind="tcp://127.0.0.1:*", curve_server=curve)
        self.endpoint = bound_endpoint(self.sock)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.transport.close()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            if not self.sock.poll(50):
                continue
            peer, *frames = self.sock.recv_multipart()
            request = decode(frames[1])
            assert isinstance(request, m.ApiRequest)
            now_ms = time.time_ns() // 1_000_000
            if self.answer == "garbage":
                reply = [os.urandom(40), os.urandom(40), os.urandom(64)]
            elif self.answer == "huge":
                result = {"jobs": [], "total": 0, "pad": "x" * (33 * 1024 * 1024)}
                reply = self.outbox.frames(
                    m.ApiReply, now_ms, request_id=request.request_id, ok=True, result=result
                )
            else:
                reply = self.outbox.frames(
                    m.ApiReply, now_ms, request_id=request.request_id, ok=True, result=self.answer
                )
            self.sock.send_multipart([peer, *reply])


@pytest.mark.parametrize("answer", ["garbage", "huge"])
def test_garbage_or_oversized_replies_are_silence_to_the_cli(tmp_path: Path, answer: str) -> None:
    with FakeServer(tmp_path, answer) as server:
        config = _client_config(
            tmp_path, server=server.endpoint, server_key=tmp_path / "server.pub", timeout="2.0"
        )
        code, _, err = cli(config, "job", "list")
    assert "Traceback" not in err, err
    assert code == 6 and err.startswith("error: "), (code, err)


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        (("job", "list"), "a string"),
        (("job", "list"), {"jobs": [{"job_id": "x"}], "total": 1}),
        (("job", "status", "x"), {"job": None}),
    ],
)
def test_a_reply_of_an_unexpected_shape_is_one_line_not_a_traceback(
    tmp_path: Path, args: tuple[str, ...], answer: Any
) -> None:
    with FakeServer(tmp_path, answer) as server:
        config = _client_config(
            tmp_path, server=server.endpoint, server_key=tmp_path / "server.pub", timeout="2.0"
        )
        code, _, err = cli(config, *args)
    assert "Traceback" not in err, err
    assert code == 10 and err.startswith("error: "), (code, err)


# --- guard: commands out of order, and odd job ids, on an agent's command socket -----------

# The in-process agent and its command socket, from tests/agent/test_command_channel.py.
channel = command_channel.channel


def test_commands_out_of_order_or_with_odd_job_ids_change_nothing(channel: Channel) -> None:
    """The server's own key, used wrongly: a run before any commit, an abort of a job never
    seen, job ids with separators and control characters. Nothing runs that was not
    committed, nothing crashes, and a real job still gets through after."""
    outbox = session_outbox(channel.server)
    channel.deliver(outbox.frames(m.Run, now_ms(), node="node-1", job_id="never-committed"))
    channel.deliver(outbox.frames(m.Abort, now_ms(), node="node-1", job_id="never-seen"))
    assert replies(channel.agent) == [("nack_run", "never-committed")]
    assert channel.agent.runner.job_id is None and channel.agent.launcher.execution is None
    for odd in ("../../etc/passwd", "a\nb\x1b[31m", "a\x00b", "x" * 200, "ü/é"):
        channel.deliver(commit(outbox, odd))
        channel.deliver(outbox.frames(m.Abort, now_ms(), node="node-1", job_id=odd))
        assert channel.agent.runner.job_id is None, odd
    assert channel.agent.launcher.execution is None
    acked = [job for kind, job in replies(channel.agent) if kind == "ack_commit"]
    assert len(acked) == 5  # each was judged on its command alone, then aborted
    channel.agent.outbound.queued.clear()
    channel.deliver(commit(outbox, "job-real"))
    assert replies(channel.agent) == [("ack_commit", "job-real")]
