from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from pushjobs.cli.key import app

runner = CliRunner()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PUSHJOBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PUSHJOBS_KEY_REGISTRY", raising=False)
    return tmp_path


def invoke(*args, input=None):
    return runner.invoke(app, list(args), input=input)


def test_gen_writes_files_with_modes(env):
    result = invoke("gen", "web-01", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fingerprint"].startswith("SHA256:")
    assert stat.S_IMODE(os.stat(data["private"]).st_mode) == 0o600
    assert data["private"] == str(env / "home" / "keys" / "web-01.key")


def test_gen_refuses_overwrite_and_bad_names(env):
    assert invoke("gen", "a").exit_code == 0
    result = invoke("gen", "a")
    assert result.exit_code == 10 and "already exists" in result.stderr
    result = invoke("gen", "bad name")
    assert result.exit_code == 10 and "invalid name" in result.stderr


def test_add_list_accept_reject_show_delete(env):
    keydir = env / "k"
    for name, kind in (("web-01", "node"), ("web-02", "node"), ("alice", "user")):
        assert invoke("gen", name, "--kind", kind, "--dir", str(keydir)).exit_code == 0
    assert invoke("add", str(keydir / "web-01.pub"), str(keydir / "web-02.pub")).exit_code == 0
    result = invoke("add", str(keydir / "alice.pub"), "--role", "writer", "--accept", "--json")
    assert json.loads(result.stdout)[0]["role"] == "writer"

    listed = json.loads(invoke("list", "--state", "pending", "--json").stdout)
    assert sorted(e["name"] for e in listed) == ["web-01", "web-02"]
    table = invoke("list").stdout
    assert table.splitlines()[0].split() == ["NAME", "KIND", "ROLE", "STATE", "FINGERPRINT"]

    result = invoke("accept", "web-01", "--json")
    assert json.loads(result.stdout) == [{"name": "web-01", "ok": True, "state": "accepted"}]
    result = invoke("reject", "web-01")
    assert result.exit_code == 0 and "web-01: rejected (now rejected)" in result.stdout

    shown = json.loads(invoke("show", "web-01", "--json").stdout)
    assert shown["state"] == "rejected" and shown["fingerprint"].startswith("SHA256:")
    assert "fingerprint" in invoke("show", "web-01").stdout

    assert invoke("delete", "web-02", "--yes").exit_code == 0
    assert invoke("show", "web-02").exit_code == 8


def test_partial_failure_processes_the_rest_and_exits_non_zero(env):
    invoke("gen", "a", "--dir", str(env / "k"))
    invoke("add", str(env / "k" / "a.pub"))
    result = invoke("accept", "nobody", "a")
    assert result.exit_code == 1
    assert "nobody: no key named 'nobody'" in result.stderr
    assert "a: accepted" in result.stdout
    result = invoke("accept", "a")  # already accepted: illegal move
    assert result.exit_code == 1 and "cannot accept a key that is accepted" in result.stderr


def test_bad_state_filter_is_a_usage_error(env):
    result = invoke("list", "--state", "bogus")
    assert result.exit_code == 2 and "unknown state" in result.stderr


def test_delete_asks_for_confirmation(env):
    invoke("gen", "a", "--dir", str(env / "k"))
    invoke("add", str(env / "k" / "a.pub"))
    assert invoke("delete", "a", input="n\n").exit_code == 1
    assert invoke("show", "a").exit_code == 0
    assert invoke("delete", "a", input="y\n").exit_code == 0


def test_corrupt_registry_is_reported(env):
    reg = env / "reg.json"
    reg.write_text("{nope")
    result = invoke("list", "--registry", str(reg))
    assert result.exit_code == 10 and "corrupt key registry" in result.stderr
