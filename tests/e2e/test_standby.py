"""Two servers, one log (SQLite, one host), real agents: the standby sends everyone to the
leader, and a failover moves the fleet to the new one.

The agents list the standby first, so every path that used to stick to whichever server
answered first is exercised: discovery, the leader flag of the heartbeats, config
lifetimes ending, the CLI following the leader.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pushjobs.api.client import ApiClient
from pushjobs.cli.app import app
from pushjobs.cli.audit_commands import check_log, server_key
from pushjobs.cli.exitcodes import Exit
from pushjobs.errors import ApiError
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.testbed.childproc import stop_all
from pushjobs.testbed.sandbox import Sandbox
from pushjobs.testbed.tomlwrite import toml_text
from tests.e2e.conftest import WHITELIST, Fleet
from tests.e2e.standby import SECOND, api_of, start_second_server
from tests.e2e.test_approvals import add_user
from tests.support import wait_until

pytestmark = pytest.mark.e2e

LIFETIME_S = 3.0  # agents' config lifetime: short, so that it ends within a test


class Pair(Fleet):
    """A fleet with two servers; its client knows both and follows the leader."""

    def __init__(self, sandbox: Sandbox, standby_api: str) -> None:
        super().__init__(sandbox)
        self.standby_api = standby_api

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            self._client = self.connect([self.standby_api, self.sandbox.api])
        return self._client

    def connect(self, endpoints: list[str], timeout_s: float = 15.0) -> ApiClient:
        return ApiClient.from_files(
            endpoints,
            self.root / "keys" / "server.pub",
            self.root / "keys" / f"{self.sandbox.user}.key",
            timeout_s=timeout_s,
        )

    def servers(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.call("server.list")["servers"]
        return rows

    def leader_api(self) -> str | None:
        leaders = [row["api"] for row in self.servers() if row["role"] == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def node_servers(self) -> dict[str, str]:
        """Each node's agent: the server it last took a config from (its log says)."""
        found = {}
        for name in self.sandbox.nodes:
            lines = [
                line
                for line in self.sandbox.procs[name].log_text().splitlines()
                if "config from" in line
            ]
            if lines:
                found[name] = lines[-1].split("config from ", 1)[1].split()[0]
        return found


@contextlib.contextmanager
def two_servers(
    tmp_path: Path,
    *,
    standby_first: bool,
    silence_factor: float | None = None,
    lifetime_s: float = LIFETIME_S,
    log: dict[str, object] | None = None,
    policy: dict[str, object] | None = None,
) -> Iterator[Pair]:
    """The sandbox's server leads; ``server-b`` stands by; three agents list both, the
    standby first or last (and wait ``silence_factor`` offline windows of silence before
    they rediscover, when given). ``log``: settings of the servers' ``[log]`` table;
    ``policy``: their ``[policy]``."""
    extra: dict[str, dict[str, object]] = {
        "server": {"config_lifetime_s": lifetime_s},
        "log": log or {},
    }
    if policy is not None:
        extra["policy"] = policy
    sandbox = Sandbox(tmp_path / "fleet", whitelist=WHITELIST, server_extra=extra).prepare()
    try:
        sandbox.start_server()
        standby = start_second_server(sandbox)
        assert "leader=no" in standby.ready_line, standby.ready_line
        both = [api_of(standby), sandbox.api]
        for name in sandbox.nodes:
            path = sandbox.write_agent_config(name, servers=both if standby_first else both[::-1])
            if silence_factor is not None:
                agent = tomllib.loads(path.read_text())
                agent["discovery"]["silence_factor"] = silence_factor
                path.write_text(toml_text(agent))
        sandbox.start_agents()
        pair = Pair(sandbox, api_of(standby))
        try:
            pair.wait_online()
            yield pair
        finally:
            pair.reconnect()  # closes its client
    finally:
        sandbox.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    """Two servers; the agents list the standby first."""
    with two_servers(tmp_path, standby_first=True) as pair:
        yield pair


@pytest.fixture
def leader_first(tmp_path: Path) -> Iterator[Pair]:
    """Two servers; the agents list the leader first (as before a failover)."""
    with two_servers(tmp_path, standby_first=False) as pair:
        yield pair


def client_config(pair: Pair, endpoints: list[str]) -> Path:
    """A CLI config naming ``endpoints``, in that order."""
    path = pair.root / "client-both.toml"
    config = tomllib.loads(pair.sandbox.client_config_path.read_text())
    config["client"]["server"] = endpoints
    path.write_text(toml_text(config))
    return path


def test_agents_listing_the_standby_first_end_up_on_the_leader_and_jobs_succeed(
    pair: Pair,
) -> None:
    job = pair.start("hello")
    done = pair.wait_job(job["job_id"])
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 3}, done
    assert set(pair.node_servers().values()) == {pair.sandbox.api}
    # Membership: both servers, with their roles and endpoints.
    wait_until(lambda: len(pair.servers()) == 2, timeout_s=10)
    rows = pair.servers()
    assert [(r["role"], r["api"]) for r in rows] == [
        ("leader", pair.sandbox.api),
        ("standby", pair.standby_api),
    ]
    assert rows[0]["epoch"] is not None and rows[1]["epoch"] is None
    # The standby refuses job requests naming the leader; a client of it alone follows.
    with pair.connect([pair.standby_api]) as client:
        listed = client.call("job.list", {})
        assert listed["jobs"][0]["job_id"] == job["job_id"]
        assert client.endpoint == pair.sandbox.api


def test_the_standby_answers_config_requests_not_leader_with_the_leaders_endpoint(
    pair: Pair,
) -> None:
    log = pair.sandbox.procs["node-1"].log_text()
    assert f"{pair.standby_api}: this server is not the leader; the leader is at " in log, log
    # The standby serves nobody: no node is online there.
    with pair.connect([pair.standby_api]) as client:
        info = client.call("server.info", {})
    assert info["leader"] is False and info["nodes_online"] == 0


def test_leader_killed_mid_job_the_standby_finishes_it_and_the_fleet_follows(pair: Pair) -> None:
    job = pair.start("count-slowly")
    for name in pair.sandbox.nodes:
        pair.wait_node_state(job["job_id"], name, "running")
    pair.sandbox.kill("server", signal.SIGKILL)
    done = pair.wait_job(job["job_id"], timeout_s=40)
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 3}, done
    for name in pair.sandbox.nodes:
        assert (pair.root / f"count-{name}").read_text() == "x\n"
    wait_until(lambda: set(pair.node_servers().values()) == {pair.standby_api}, timeout_s=20)
    assert pair.leader_api() == pair.standby_api
    pair.wait_online()
    again = pair.start("true")
    assert pair.wait_job(again["job_id"])["summary"] == {"succeeded": 3}
    # The audit trail ran across the takeover: the new leader went on with the chains its
    # predecessor left, and sealed them all as it stopped (its last checkpoint).
    stop_all([pair.sandbox.procs[SECOND]], 10.0)
    handle = open_log(LogSettings(path=pair.sandbox.root / "log.db", create=False))
    try:
        report = check_log(handle, "pushjobs.", server_key(pair.sandbox.keys_dir / "server.pub"))
    finally:
        handle.close()
    assert report.ok, report.problems
    events = report.topics["pushjobs.events"]
    assert events.streams == 1 and events.unsealed == 0 and events.chained > 0, events


# ~20 s: bench/drills.py (the suite: tests/server/test_approvals.py's takeover of a held job
# and its decision, and test_approvals.py's restart while held, on the unit level).
@pytest.mark.drill
def test_a_job_held_for_approval_is_approved_on_the_standby_that_took_over_and_runs_once(
    tmp_path: Path,
) -> None:
    policy = {"commands": ["^stamp$"], "approval_expiry_s": 300}
    with two_servers(tmp_path, standby_first=True, policy=policy) as pair:
        add_user(pair, "bob", "admin")  # in the log's registry: the standby knows him too
        held = pair.start("stamp")
        assert held["state"] == "awaiting_approval", held
        pair.sandbox.kill("server", signal.SIGKILL)
        wait_until(lambda: pair.call_served("server.list") is not None, 30, 0.1)
        wait_until(lambda: pair.leader_api() == pair.standby_api, 30, 0.1)
        again = pair.status(held["job_id"])
        assert again["state"] == "awaiting_approval", again  # the same hold, the same expiry
        assert again["approval"]["expires_ms"] == held["approval"]["expires_ms"]
        keys = pair.root / "keys"
        with ApiClient.from_files(
            pair.standby_api, keys / "server.pub", keys / "bob.key", timeout_s=10.0
        ) as bob:
            bob.call("job.approve", {"job_id": held["job_id"], "reason": "after the failover"})
        done = pair.wait_job(held["job_id"], timeout_s=40)
        assert done["state"] == "complete" and done["summary"] == {"succeeded": 3}, done
        assert done["approval"]["decided_by"] == "bob", done["approval"]
        for name in pair.sandbox.nodes:  # each node ran it once
            assert (pair.root / f"stamps-{name}").read_text().split() == [held["job_id"]]


def test_old_leader_restarted_stays_standby_and_the_fleet_stays_put(leader_first: Pair) -> None:
    pair = leader_first  # the agents ask the old leader first whenever they rediscover
    pair.sandbox.kill("server", signal.SIGKILL)
    wait_until(lambda: pair.leader_api() == pair.standby_api, timeout_s=20)
    wait_until(lambda: set(pair.node_servers().values()) == {pair.standby_api}, timeout_s=20)
    old = pair.sandbox.start_server()
    assert "leader=no" in old.ready_line, old.ready_line
    logs = {name: pair.sandbox.procs[name].log_text for name in pair.sandbox.nodes}
    moves = {name: text().count("config from") for name, text in logs.items()}
    # Config lifetimes end (twice over): the agents ask again and stay on the leader.
    wait_until(
        lambda: all(text().count("config from") >= moves[n] + 2 for n, text in logs.items()),
        timeout_s=5 * LIFETIME_S + 10,
    )
    assert set(pair.node_servers().values()) == {pair.standby_api}
    pair.wait_online()
    job = pair.start("hello")
    assert pair.wait_job(job["job_id"])["summary"] == {"succeeded": 3}
    roles = {(r["api"], r["role"]) for r in pair.servers()}
    assert (pair.standby_api, "leader") in roles and (pair.sandbox.api, "standby") in roles
    assert pair.sandbox.procs[SECOND].alive()


def test_agents_leave_a_leader_that_resumes_as_a_standby(tmp_path: Path) -> None:
    """Stopped past its lease, the leader is succeeded; woken, it stands by and its
    heartbeats say so: the agents, which would wait long for silence alone, move to the
    new leader within a few intervals (they used to stay, and jobs failed)."""
    quiet = {"silence_factor": 50.0, "lifetime_s": 600.0}  # only the leader flag moves them
    with two_servers(tmp_path, standby_first=False, **quiet) as pair:
        old = pair.sandbox.procs["server"].pid
        os.kill(old, signal.SIGSTOP)
        try:
            wait_until(lambda: pair.leader_api() == pair.standby_api, timeout_s=20)
        finally:
            os.kill(old, signal.SIGCONT)
        wait_until(lambda: set(pair.node_servers().values()) == {pair.standby_api}, timeout_s=10)
        for name in pair.sandbox.nodes:
            assert "the server no longer leads" in pair.sandbox.procs[name].log_text()
        pair.wait_online()
        job = pair.start("hello")
        assert pair.wait_job(job["job_id"])["summary"] == {"succeeded": 3}
        # Once it has written again (its next renewal), the old leader is listed standing by.
        wanted = {(pair.standby_api, "leader"), (pair.sandbox.api, "standby")}
        wait_until(lambda: {(r["api"], r["role"]) for r in pair.servers()} >= wanted, 10)


def test_a_job_started_during_a_takeover_waits_for_the_new_leader(pair: Pair) -> None:
    pair.client.call("job.list", {})  # the client has found the leader
    pair.sandbox.kill("server", signal.SIGKILL)
    # At once: the client meets the dead leader's silence, then the standby, leader or
    # about to be; it waits for it instead of failing (it used to exit 6 or NOT_LEADER).
    try:
        job = pair.start("true")
    except ApiError as exc:  # pragma: no cover - shows what the client gave up on
        raise AssertionError(f"job.start did not wait for the new leader: {exc}") from exc
    assert pair.client.endpoint == pair.standby_api
    done = pair.wait_job(job["job_id"], timeout_s=30)
    # The fleet had not moved yet when the job started: the new leader waits for the
    # nodes it has not heard since the takeover instead of finding them unavailable.
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 3}, done
    pair.wait_online()
    again = pair.start("true")
    assert pair.wait_job(again["job_id"])["summary"] == {"succeeded": 3}


def test_server_list_shows_every_server_with_its_role_and_endpoints(pair: Pair) -> None:
    config = client_config(pair, [pair.standby_api, pair.sandbox.api])
    env = {"PUSHJOBS_CONFIG": str(config)}
    wait_until(lambda: len(pair.servers()) == 2, timeout_s=10)
    code, out, _ = cli(env, "server", "list", "--json")
    assert code == Exit.OK
    rows = json.loads(out)
    assert [(r["role"], r["api"], r["self"]) for r in rows] == [
        ("leader", pair.sandbox.api, False),
        ("standby", pair.standby_api, True),  # the standby answered: listed first
    ]
    code, out, _ = cli(env, "server", "list")
    assert code == Exit.OK
    header, leader, standby = out.splitlines()
    assert header.split()[:3] == ["server", "role", "epoch"]
    assert "leader" in leader and pair.sandbox.api in leader
    assert "standby" in standby and standby.split()[1] == "*" and pair.standby_api in standby


def test_the_cli_follows_a_job_through_the_leaders_death(leader_first: Pair) -> None:
    """``job start`` waits: the leader it started the job on is killed mid-run; the CLI
    follows the job on the new leader and exits 0 (it used to end "no job" or exit 6)."""
    pair = leader_first
    config = client_config(pair, [pair.sandbox.api, pair.standby_api])
    argv = [sys.executable, "-m", "pushjobs.cli.app", "job", "start", "count-slowly", "node-*"]
    env = {**pair.sandbox.env(), "PUSHJOBS_CONFIG": str(config)}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        job_id = wait_until(lambda: (jobs := pair.call("job.list")["jobs"]) and jobs[0]["job_id"])
        for name in pair.sandbox.nodes:
            pair.wait_node_state(job_id, name, "running")
        pair.sandbox.kill("server", signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == Exit.OK, (out, err)
    assert "complete: 3 succeeded" in out
    assert err.count("waiting for a leader") <= 1, err
    for name in pair.sandbox.nodes:
        assert (pair.root / f"count-{name}").read_text() == "x\n"


def test_with_no_leader_the_cli_waits_its_timeout_then_exits_6(pair: Pair) -> None:
    pair.sandbox.kill("server", signal.SIGKILL)
    pair.sandbox.kill(SECOND, signal.SIGKILL)
    config = client_config(pair, [pair.standby_api, pair.sandbox.api])
    text = config.read_text().replace("timeout_s = 10.0", "timeout_s = 2.0")
    config.write_text(text)
    code, _, err = cli({"PUSHJOBS_CONFIG": str(config)}, "job", "list")
    assert code == Exit.UNREACHABLE, err
    assert "waiting for a leader" in err and "within 2 s" in err


def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_watch_parked_on_a_leader_that_stands_down_follows_the_job_to_the_new_leader(
    leader_first: Pair,
) -> None:
    """``job start`` waits on the leader, which is stopped past its lease mid-run: the
    standby takes the job over. Woken, the old leader stands by and answers the watch it
    held ``not_leader``, naming the new leader; the CLI follows and ends with the job's own
    outcome (it used to exit 8, "no job": the deposed server's coordinator is empty)."""
    pair = leader_first
    config = client_config(pair, [pair.sandbox.api, pair.standby_api])
    argv = [sys.executable, "-m", "pushjobs.cli.app", "job", "start", "count-slowly", "node-*"]
    env = {**pair.sandbox.env(), "PUSHJOBS_CONFIG": str(config)}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    old = pair.sandbox.procs["server"].pid
    try:
        job_id = wait_until(lambda: (jobs := pair.call("job.list")["jobs"]) and jobs[0]["job_id"])
        for name in pair.sandbox.nodes:
            pair.wait_node_state(job_id, name, "running")
        os.kill(old, signal.SIGSTOP)
        try:
            standby = pair.connect([pair.standby_api])
            try:
                wait_until(lambda: pair.leader_api() == pair.standby_api, timeout_s=20)
                wait_until(
                    lambda: (
                        standby.call("job.status", {"job_id": job_id})["job"]["state"] == "complete"
                    ),
                    timeout_s=30,
                )
            finally:
                standby.close()
        finally:
            os.kill(old, signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == Exit.OK, (out, err)
    assert "complete: 3 succeeded" in out
    for name in pair.sandbox.nodes:
        assert (pair.root / f"count-{name}").read_text() == "x\n"
