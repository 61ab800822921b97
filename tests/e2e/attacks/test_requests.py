"""Requests a user holding a valid writer key may send: absurd but well-formed.

Huge numbers, a commit that outgrows the frame limit, NUL bytes, hostile command names,
output floods, an idle-connection flood on an agent's command socket. What must hold: the
server keeps serving (no traceback kills it, on this request or after a restart), the
request is refused with ``bad_request`` or nacked by the node, and nothing that should not
run runs. (``test_hostile.py`` covers strangers: garbage, replays, forgeries.)
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from keys.identity import generate
from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError, Unreachable
from pushjobs.protocol import messages as m
from pushjobs.protocol.codec import encode
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.testbed.sandbox import ready_fields
from tests.e2e.attacks.support import (
    ATTACK_WHITELIST,
    CAPTURE_BYTES,
    assert_refused,
    hostile_client,
    job_done,
    log_tail,
    server_alive,
    settled,
)
from tests.e2e.conftest import Fleet, make_fleet
from tests.e2e.conftest import run_cli as cli
from tests.support import wait_until

pytestmark = pytest.mark.e2e


# --- a commit larger than the frame limit ---------------------------------------

LONG_NODE = (
    "node-" + "x" * 123
)  # the longest name a key may have  # its name is in every commit, not in the request


def _request_body(client: ApiClient, params: dict[str, Any]) -> int:
    request = client._outbox.message(
        m.ApiRequest, 0, request_id="0" * 16, method="job.start", params=params
    )
    return len(encode(request))


def _commit_body(env: dict[str, str]) -> int:
    """The size of the commit the server makes of that request (as server/shell/commands.py)."""
    outbox = Outbox("server", "0" * 16, Ed25519Signer("k", generate("s", "server").signing_key()))
    commit = outbox.message(
        m.Commit,
        0,
        node=LONG_NODE,
        job_id="0" * 19,
        command="true",
        options=m.RunOptions(timeout_s=3600.0, env=env, capture=False),
    )
    return len(encode(commit))


def test_a_job_whose_commit_outgrows_the_frame_limit_does_not_kill_the_server(
    tmp_path: Path,
) -> None:
    fleet = make_fleet(tmp_path, nodes=[LONG_NODE], whitelist=ATTACK_WHITELIST)
    try:
        fleet.wait_online()
        client = hostile_client(fleet)
        # The request fits the API socket's frame limit; the commit built from it (the
        # node's long name, the options' defaults) does not fit the command channel's.
        env = {"X": "a" * 65_226}
        params = {"command": "true", "nodes": ["node-*"], "env": env}
        assert 65_400 < _request_body(client, params) < 65_470  # CurveZMQ adds ~33 bytes
        assert _commit_body(env) > 65_600
        started = None
        try:
            started = client.call("job.start", params)["job"]["job_id"]
        except ApiError as exc:
            assert exc.code == "bad_request", exc  # refused up front: what should happen
        except Unreachable:
            pass  # the server died under the request: asserted below
        finally:
            client.close()
        settled(fleet, started, node=LONG_NODE)
        if started is not None:
            job = fleet.status(started)
            assert job["nodes"][LONG_NODE]["state"] != "succeeded", job
            # The job is in the log: a restarted server must not die on it either.
            fleet.reconnect()
            fleet.sandbox.kill("server")
            fleet.sandbox.start_server()
            settled(fleet, None, node=LONG_NODE)
        job = fleet.start("true")
        assert job_done(fleet, job["job_id"])["state"] == "complete"
    finally:
        fleet.close()


# --- numbers beyond 64 bits ------------------------------------------------


@pytest.mark.parametrize("params", [{"timeout_s": 1e308}, {"timeout_s": 1e17}])
def test_a_huge_timeout_is_refused(fleet: Fleet, params: dict[str, Any]) -> None:
    assert_refused(fleet, {"command": "true", "nodes": ["node-1"], **params}, "job.start")


def test_a_huge_timeout_typed_at_the_cli_is_refused(fleet: Fleet) -> None:
    config = fleet.sandbox.client_config_path
    code, _, err = cli(config, "job", "start", "true", "node-1", "--timeout", "1e17")
    assert code == 2 and err.startswith("error: "), (code, err)
    assert server_alive(fleet), "the server died: " + log_tail(fleet, "server")


def test_a_huge_batch_size_is_refused(fleet: Fleet) -> None:
    params = {"command": "true", "nodes": ["node-1"], "batch": "99999999999999999999"}
    assert_refused(fleet, params, "job.start")


@pytest.mark.parametrize("in_s", [1e308, 1e17])
def test_a_schedule_in_the_far_future_is_refused(fleet: Fleet, in_s: float) -> None:
    assert_refused(fleet, {"command": "true", "nodes": ["node-1"], "in_s": in_s}, "schedule.add")


def test_a_schedule_with_a_huge_timeout_does_not_kill_the_server_when_it_fires(
    tmp_path: Path,
) -> None:
    fleet = make_fleet(tmp_path, nodes=["node-1"], whitelist=ATTACK_WHITELIST)
    try:
        fleet.wait_online()
        params = {"command": "true", "nodes": ["node-1"], "in_s": 0.5, "timeout_s": 1e17}
        try:
            schedule = fleet.call("schedule.add", params)["schedule"]["schedule_id"]
        except ApiError as exc:
            assert exc.code == "bad_request", exc  # refused up front: what should happen
            return

        def fired_or_dead() -> bool:
            if not server_alive(fleet):
                return True
            fires = fleet.call("schedule.history", {"schedule_id": schedule})["fires"]
            return bool(fires) and fires[-1].get("job_id") is not None

        wait_until(fired_or_dead, 20.0, 0.1)
        assert server_alive(fleet), "the fire killed the server: " + log_tail(fleet, "server")
    finally:
        fleet.close()


# --- NUL in what reaches execve --------------------------------------------------


@pytest.mark.parametrize("params", [{"env": {"X": "a\x00b"}}, {"cwd": "/tmp\x00x"}])
def test_a_nul_in_env_or_cwd_is_refused_by_the_server(fleet: Fleet, params: dict[str, Any]) -> None:
    assert_refused(fleet, {"command": "true", "nodes": ["node-1"], **params}, "job.start")


# --- guards: attacks that are refused today -------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"quorum": "-5"},
        {"quorum": "1000%"},
        {"quorum": "nan%"},
        {"quorum": "1e400"},
        {"timeout_s": -1},
        {"timeout_s": 0},
        {"timeout_s": "10"},
        {"timeout_s": True},
        {"vote_timeout_s": -0.5},
        {"batch": "-1"},
        {"batch": 0},
        {"batch": "0%"},
        {"batch": "1e3%"},
        {"batch": "1", "max_failures": "-1"},
        {"batch": "1", "max_failures": "0"},
        {"batch": "1", "batch_wait_s": -1},
        {"batch": "1", "batch_wait_s": 1e300},
        {"capture": "yes"},
        {"cwd": 5},
        {"env": {"A=B": "x"}},
        {"env": {"X\nY": "x"}},
        {"env": {"X": 5}},
        {"env": ["X=1"]},
        {"env": {"X": "1"}, "secret_env": {"X": "2"}},
        {"nodes": []},
        {"nodes": "node-1"},
        {"command": ""},
        {"command": ["true"]},
        {"command": "true\x00"},  # no program takes a NUL: refused before any node
    ],
)
def test_absurd_job_parameters_are_refused_as_bad_requests(
    fleet: Fleet, params: dict[str, Any]
) -> None:
    assert_refused(fleet, {"command": "true", "nodes": ["node-1"], **params}, "job.start")


@pytest.mark.parametrize(
    "command",
    [
        "true; touch {root}/pwned",
        "true\ntouch {root}/pwned",
        "tru\u0435",  # a Cyrillic 'e'
        "\u200btrue",  # a zero-width space
        "sleep-1;touch {root}/pwned",
        "sleep-1 $(touch {root}/pwned)",
        "sleep-" + "9" * 5000 + "x",
        "echo-a|touch",
        "echo-" + "\u0430",  # a Cyrillic 'a': not [a-z]
    ],
)
def test_hostile_command_names_are_nacked_and_nothing_runs(fleet: Fleet, command: str) -> None:
    command = command.replace("{root}", str(fleet.root))
    job = job_done(fleet, fleet.start(command, nodes=["node-1"])["job_id"])
    node = job["nodes"]["node-1"]
    assert job["state"] == "quorum_failed" and node["state"] == "nacked", job
    assert node["reason"].startswith("command "), node  # names the command refused
    assert not (fleet.root / "pwned").exists()


def test_env_values_reach_the_command_as_plain_text(fleet: Fleet) -> None:
    value = f"$(touch {fleet.root}/pwned) `touch {fleet.root}/pwned`; echo hi | id > x \"'"
    job = fleet.start("showenv", nodes=["node-1"], capture=True, env={"X": value})
    assert job_done(fleet, job["job_id"])["state"] == "complete"
    output = fleet.call("job.output", {"job_id": job["job_id"], "node": "node-1"})
    assert output["stdout"] == f"X={value}\n"
    assert not (fleet.root / "pwned").exists()


def test_huge_and_binary_output_is_bounded_and_shown(fleet: Fleet) -> None:
    big = fleet.start("bigout", nodes=["node-1"], capture=True)
    assert job_done(fleet, big["job_id"])["state"] == "complete"
    out = fleet.call("job.output", {"job_id": big["job_id"], "node": "node-1"})
    assert len(out["stdout"]) == len(out["stderr"]) == CAPTURE_BYTES
    assert out["stdout_truncated"] and out["stderr_truncated"]
    binary = fleet.start("binout", nodes=["node-1"], capture=True)
    assert job_done(fleet, binary["job_id"])["state"] == "complete"
    out = fleet.call("job.output", {"job_id": binary["job_id"], "node": "node-1"})
    assert out["stdout"] == "\ufffd\ufffdabc\x00def"
    config = fleet.sandbox.client_config_path
    for job_id in (big["job_id"], binary["job_id"]):
        code, _, err = cli(config, "job", "output", job_id, "node-1")
        assert code == 0 and "Traceback" not in err, err


def test_an_idle_connection_flood_on_the_command_socket_does_not_stop_jobs(fleet: Fleet) -> None:
    """Connections that never finish a handshake: libzmq holds them (no ZAP sees them) until
    its handshake timeout. They cost the agent a descriptor each, and must not stop it."""
    agent = fleet.sandbox.procs["node-1"]
    endpoint = ready_fields(agent.ready_line)["command"]
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    held: list[socket.socket] = []
    try:
        for i in range(1500):
            conn = socket.create_connection((host, int(port)), timeout=5)
            if i % 2:
                conn.sendall(
                    b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x03"
                )  # a ZMTP greeting, cut
            held.append(conn)
        job = fleet.start("true", nodes=["node-1"])
        assert job_done(fleet, job["job_id"])["state"] == "complete"
    finally:
        for conn in held:
            conn.close()
    assert agent.alive() and fleet.node("node-1")["online"]
