"""Approvals end to end: a real server with a ``[policy]``, real agents, the CLI as a user
runs it. One fleet for every check (a server start is the cost): ``stamp`` needs approval,
a bare ``*`` is forbidden, and a held job expires after ``EXPIRY_S``.

``stamp`` appends its job id to a file per node, so the test sees which jobs ran where and
how often: a held, rejected or expired job never reaches a node; an approved one runs once,
a restart of the server in between notwithstanding.
"""

from __future__ import annotations

import signal
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keys import files
from keys.identity import b64, generate
from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError, Unauthorized
from pushjobs.testbed.tomlwrite import toml_text
from tests.e2e.conftest import Fleet, make_fleet, run_cli
from tests.support import wait_until

EXPIRY_S = 10.0  # long enough for the CLI calls before the approval on a busy machine
POLICY = {"commands": ["^stamp$"], "forbid_bare_star": True, "approval_expiry_s": EXPIRY_S}
NODES = ["node-1", "node-2"]


def add_user(fleet: Fleet, name: str, role: str) -> Path:
    """A user key registered with ``role``; its own client config."""
    identity = generate(name, "user")
    keys = fleet.root / "keys"
    files.save(identity, keys, force=True)
    public = identity.public
    fleet.call(
        "key.add",
        {
            "name": name,
            "kind": "user",
            "ed25519_public": b64(public.ed25519_public),
            "curve_public": public.curve_public,
            "role": role,
            "accept": True,
        },
    )
    config = tomllib.loads(fleet.sandbox.client_config_path.read_text())
    config["client"]["user_key"] = str(keys / f"{name}.key")
    path = fleet.root / f"{name}.toml"
    path.write_text(toml_text(config))
    return path


def client(fleet: Fleet, name: str) -> ApiClient:
    keys = fleet.root / "keys"
    return ApiClient.from_files(
        fleet.sandbox.api, keys / "server.pub", keys / f"{name}.key", timeout_s=10.0
    )


def stamps(fleet: Fleet, node: str) -> list[str]:
    path = fleet.root / f"stamps-{node}"
    return path.read_text().split() if path.exists() else []


@pytest.fixture(scope="module")
def approving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(
        tmp_path_factory.mktemp("approvals"), nodes=NODES, server_extra={"policy": POLICY}
    )
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def test_a_bare_star_is_refused_outright(approving: Fleet) -> None:
    code, out, err = run_cli(approving.sandbox.client_config_path, "job", "start", "hello", "*")
    assert code == 7, (code, out, err)  # unauthorized
    assert "policy.forbid_bare_star" in err
    # Anything else still starts at once: the policy holds only what it names.
    assert approving.wait_job(approving.start("hello", NODES)["job_id"])["state"] == "complete"


# 12 s: bench/drills.py (the suite: docs/approvals.md's recipe on a real fleet,
# test_docs_approvals.py, and tests/server/test_approvals.py's expiry and rebuild).
@pytest.mark.drill
def test_held_approved_by_another_admin_rejected_expired_through_a_restart(
    approving: Fleet,
) -> None:
    fleet = approving
    admin = fleet.sandbox.client_config_path
    bob = add_user(fleet, "bob", "admin")
    add_user(fleet, "walt", "writer")
    expiring = fleet.start("stamp", NODES)  # left alone: it expires at the end

    # job start returns at once, saying why and what next, exit 11.
    code, out, err = run_cli(admin, "job", "start", "stamp", *NODES)
    assert code == 11, (code, out, err)
    assert "awaits approval" in out and "policy.commands" in out and "job approve" in out
    job_id = out.split()[1]
    held = fleet.status(job_id)
    assert held["state"] == "awaiting_approval", held
    assert held["approval"]["expires_ms"] - held["created_ms"] == EXPIRY_S * 1000
    code, out, err = run_cli(admin, "job", "list", "--state", "awaiting_approval")
    assert code == 0 and job_id in out and "awaiting approval until" in out, out

    # Not by its requester, not by a writer; by another admin, it runs, once.
    code, out, err = run_cli(admin, "job", "approve", job_id)
    assert code == 7 and "cannot approve it: another admin must" in err, (code, err)
    with client(fleet, "walt") as walt, pytest.raises(Unauthorized):
        walt.call("job.approve", {"job_id": job_id})
    assert fleet.status(job_id)["state"] == "awaiting_approval"
    code, out, err = run_cli(bob, "job", "approve", job_id, "--reason", "CHG-42")
    assert code == 0 and "approved by bob: CHG-42" in out, (code, out, err)
    done = fleet.wait_job(job_id)
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 2}, done
    assert done["approval"]["decided_by"] == "bob", done["approval"]
    code, out, err = run_cli(bob, "job", "approve", job_id)
    assert code == 10 and "not awaiting approval" in err, (code, err)

    # Rejected: it ends, the reason on every node, which none heard of.
    rejected = fleet.start("stamp", NODES)["job_id"]
    with client(fleet, "bob") as bob_client:
        bob_client.call("job.reject", {"job_id": rejected, "reason": "not now"})
    ended = fleet.status(rejected)
    assert ended["state"] == "rejected", ended
    assert {n["reason"] for n in ended["nodes"].values()} == {"rejected by bob: not now"}
    code, _, _ = run_cli(admin, "job", "status", rejected)
    assert code == 12

    # A restart while a job is held: still held on the next leader, with the same expiry;
    # approved there, it runs once.
    survivor = fleet.start("stamp", NODES)
    fleet.sandbox.kill("server", signal.SIGKILL)
    fleet.sandbox.start_server()
    fleet.reconnect()
    again = wait_until(lambda: fleet.status_or_none(survivor["job_id"]), 20, 0.1)
    assert again["state"] == "awaiting_approval", again
    assert again["approval"] == survivor["approval"]
    fleet.wait_online()
    with client(fleet, "bob") as bob_client:
        bob_client.call("job.approve", {"job_id": survivor["job_id"]})
    assert fleet.wait_job(survivor["job_id"])["state"] == "complete"

    # Expired: the first one, never decided.
    gone: dict[str, Any] = fleet.wait_job(expiring["job_id"], timeout_s=EXPIRY_S + 10)
    assert gone["state"] == "rejected" and gone["approval"]["decision"] == "expired", gone
    assert {n["state"] for n in gone["nodes"].values()} == {"skipped"}

    for node in NODES:
        assert sorted(stamps(fleet, node)) == sorted([job_id, survivor["job_id"]])
    with pytest.raises(ApiError) as caught:
        fleet.call("job.approve", {"job_id": "nonesuch"})
    assert caught.value.code == "not_found"
