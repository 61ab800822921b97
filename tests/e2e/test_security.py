"""Enrolment, revocation and hostile input end to end."""

from __future__ import annotations

import os
import time
from pathlib import Path

import zmq

from keys.registry import KeyRegistry
from pushjobs.transport.sockets import CurveKeys, Transport
from tests.e2e.conftest import Fleet, make_fleet
from tests.support import wait_until


def test_pending_node_gets_no_job_until_accepted(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path, accept_nodes=False, nodes=["node-1"])
    try:
        registry = KeyRegistry(fleet.sandbox.registry_path)
        wait_until(lambda: registry.find("node-1") is not None, 10)
        assert registry.get("node-1").state.value == "pending"
        job = fleet.start("true", ["node-1"])
        done = fleet.wait_job(job["job_id"])
        assert done["state"] == "quorum_failed"
        assert done["nodes"]["node-1"]["state"] == "unavailable"
        fleet.call("key.accept", {"names": ["node-1"]})
        fleet.wait_online(["node-1"])
        job = fleet.start("true", ["node-1"])
        assert fleet.wait_job(job["job_id"])["state"] == "complete"
    finally:
        fleet.close()


def test_revoked_node_is_cut_off(fleet: Fleet) -> None:
    job = fleet.start("sleeper", ["node-1", "node-2"])
    fleet.wait_node_state(job["job_id"], "node-1", "running")
    fleet.call("key.reject", {"names": ["node-1"]})
    fleet.wait_node_state(job["job_id"], "node-1", "crashed", timeout_s=10)
    assert fleet.status(job["job_id"])["nodes"]["node-1"]["reason"] == "key revoked"
    fleet.wait_offline("node-1")
    fleet.call("job.abort", {"job_id": job["job_id"]})
    fleet.wait_job(job["job_id"])
    # node-2 is free again once its aborted command is gone (a slow machine takes a while).
    wait_until(lambda: fleet.node("node-2")["job_id"] is None, timeout_s=10)
    later = fleet.start("true", ["node-1", "node-2"], quorum="1")
    done = fleet.wait_job(later["job_id"])
    assert done["nodes"]["node-1"]["state"] == "unavailable"
    assert done["nodes"]["node-2"]["state"] == "succeeded"


def test_garbage_on_every_server_socket_is_dropped_and_counted(shared_fleet: Fleet) -> None:
    sandbox = shared_fleet.sandbox
    before = shared_fleet.call("server.info")["drops"]
    node = sandbox.identities["node-1"]
    server = sandbox.identities["server"]
    stranger = CurveKeys(
        node.public.curve_public, node.curve_secret
    )  # an accepted node's transport key, with no session key behind its messages
    junk = [
        [b"garbage"],
        [b"PJ1 hmac-sha256 nokey", b"{}"],
        [b"PJ1 hmac-sha256 nokey", b"{}", b"x" * 32, b"extra"],
        [b"\xff" * 3000, b"{}", b"x" * 32],
        [b"PJ1 ed25519 0123456789abcdef", b'{"type":"api_request"}', os.urandom(64)],
    ]
    with Transport() as transport:
        pull = transport.socket(
            "push",
            connect=sandbox.reply,
            curve_client=stranger,
            server_public=server.public.curve_public,
        )
        api = transport.socket(
            "dealer",
            connect=sandbox.api,
            curve_client=stranger,
            server_public=server.public.curve_public,
        )
        # A frame above the body limit gets its sender disconnected by libzmq before the
        # server sees it (ZMQ_MAXMSGSIZE): sent on sockets of their own, it never counts.
        for endpoint, kind in ((sandbox.reply, "push"), (sandbox.api, "dealer")):
            huge = transport.socket(
                kind,
                connect=endpoint,
                curve_client=stranger,
                server_public=server.public.curve_public,
                max_message_bytes=1 << 20,
            )
            huge.send_multipart([b"PJ1 hmac-sha256 nokey", b"x" * (70 * 1024), b"x" * 32])
        for frames in junk:
            pull.send_multipart(frames)
            api.send_multipart(frames)

        def counted() -> bool:
            drops = shared_fleet.call("server.info")["drops"]
            return sum(drops["reply"].values()) >= sum(before["reply"].values()) + len(
                junk
            ) and sum(drops["api"].values()) >= sum(before["api"].values()) + len(junk)

        wait_until(counted, 10)
        # Garbage gets no answer at all.
        assert api.poll(200, zmq.POLLIN) == 0
    drops = shared_fleet.call("server.info")["drops"]
    assert drops["reply"].get("oversized", 0) >= 1
    assert drops["api"].get("frame", 0) >= 1
    job = shared_fleet.start("true")
    assert shared_fleet.wait_job(job["job_id"])["state"] == "complete"


def test_unaccepted_user_is_refused(shared_fleet: Fleet) -> None:
    from keys import files
    from keys.identity import generate
    from pushjobs.api.client import ApiClient
    from pushjobs.errors import Unauthorized

    mallory = generate("mallory", "user")
    files.save(mallory, shared_fleet.root / "other-keys")
    client = ApiClient.from_files(
        shared_fleet.sandbox.api,
        shared_fleet.root / "keys" / "server.pub",
        shared_fleet.root / "other-keys" / "mallory.key",
        timeout_s=2.0,
    )
    with client:
        started = time.monotonic()
        try:
            client.call("job.list", {})
        except Unauthorized:
            pass
        else:
            raise AssertionError("an unknown user was served")
        assert time.monotonic() - started < 2.0  # a refusal, not a timeout
