"""What the attack tests share: the fleet they attack, a client that sends what the real
CLI would not, and the checks that the server lived through it."""

from __future__ import annotations

from typing import Any

import pytest

from keys import files
from keys.identity import generate
from pushjobs.api.client import ApiClient
from pushjobs.cli.keyadmin import RemoteKeys
from pushjobs.errors import ApiError, Unreachable
from pushjobs.protocol.framing import Limits
from tests.e2e.conftest import TERMINAL, WHITELIST, Fleet
from tests.support import wait_until

CAPTURE_BYTES = 16384  # the agent's default capture_bytes
ATTACK_WHITELIST = {
    **WHITELIST,
    # more output than any capture keeps, on both channels
    "bigout": "sh -c 'yes abcdefgh | head -c 200000; yes ABCDEFGH | head -c 200000 >&2'",
    # bytes that are not UTF-8, and a NUL
    "binout": "printf '\\377\\376abc\\000def'",
    # prints a variable as the command sees it
    "showenv": "sh -c 'echo \"X=$X\"'",
    "echo-(?P<word>[a-z]+)": "echo {word}",
}
BIG_LIMITS = Limits(max_body_bytes=32 * 1024 * 1024)


def responsive(fleet: Fleet) -> bool:
    if not server_alive(fleet):
        return False
    quick = hostile_client(fleet, timeout_s=2.0)
    try:
        quick.call("server.info")
        return True
    except Unreachable:
        return False
    finally:
        quick.close()


def server_alive(fleet: Fleet) -> bool:
    return fleet.sandbox.procs["server"].alive()


def hostile_client(fleet: Fleet, timeout_s: float = 5.0) -> ApiClient:
    """A writer's client that sends requests as large as the server's API socket takes
    (the real CLI stops at the protocol's body limit; an attacker's client need not)."""
    client = ApiClient.from_files(
        fleet.sandbox.api,
        fleet.root / "keys" / "server.pub",
        fleet.root / "keys" / f"{fleet.sandbox.user}.key",
        timeout_s=timeout_s,
    )
    client._outbox.limits = BIG_LIMITS
    return client


def assert_refused(fleet: Fleet, params: dict[str, Any], method: str) -> None:
    """Send ``params``: it must be refused as a bad request, and the server must live."""
    client = hostile_client(fleet)
    try:
        with pytest.raises(ApiError) as refused:
            client.call(method, params)
        assert refused.value.code == "bad_request", refused.value
    finally:
        client.close()
        assert server_alive(fleet), "the server died: " + log_tail(fleet, "server")


def log_tail(fleet: Fleet, name: str, lines: int = 3) -> str:
    text = (fleet.root / "logs" / f"{name}.log").read_text(errors="replace")
    return " | ".join(text.strip().splitlines()[-lines:])


def job_done(fleet: Fleet, job_id: str) -> dict[str, Any]:
    return fleet.wait_job(job_id, timeout_s=20.0)


def settled(fleet: Fleet, job_id: str | None, node: str | None = None) -> None:
    """Wait until ``job_id`` has ended (and ``node`` is online), or the server has died:
    fail at once, not after a client's timeout, when it has."""
    quick = hostile_client(fleet, timeout_s=2.0)

    def done() -> bool:
        if not server_alive(fleet):
            return True
        try:
            if job_id is not None:
                state = quick.call("job.status", {"job_id": job_id})["job"]["state"]
                return state in TERMINAL
            rows = quick.call("node.status", {"nodes": [node]})["nodes"]
            return bool(rows[0]["online"])
        except Unreachable:
            return not server_alive(fleet)

    try:
        wait_until(done, 20.0, 0.05)
    finally:
        quick.close()
    assert server_alive(fleet), "the server died: " + log_tail(fleet, "server")


def writer(fleet: Fleet, name: str) -> ApiClient:
    """A new writer key, added and accepted by the fleet's admin, and its client."""
    identity = generate(name, "user")
    files.save(identity, fleet.root / "keys", force=True)
    RemoteKeys(fleet.client).add(identity.public, "writer", accept=True)
    return ApiClient.from_files(
        fleet.sandbox.api,
        fleet.root / "keys" / "server.pub",
        fleet.root / "keys" / f"{name}.key",
        timeout_s=10.0,
    )
