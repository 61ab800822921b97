from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from keys.identity import generate
from keys.registry import KeyRegistry
from pushjobs.cli.key_commands import app

runner = CliRunner()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PUSHJOBS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PUSHJOBS_KEY_REGISTRY", raising=False)
    # No client config anywhere: the commands work on the default registry file.
    monkeypatch.delenv("PUSHJOBS_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


def invoke(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def gen(env, name, kind="node"):
    result = invoke("gen", name, "--kind", kind, "--dir", env / "k")
    assert result.exit_code == 0, result.output
    return env / "k" / f"{name}.pub"


def registry(env):
    return KeyRegistry(env / "home" / "registry.json")


# --- gen ----------------------------------------------------------------------------------


def test_gen_writes_files_into_the_default_dir(env):
    result = invoke("gen", "web-01", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["private"] == str(env / "home" / "keys" / "web-01.key")
    assert data["public"] == str(env / "home" / "keys" / "web-01.pub")
    assert data["kind"] == "node" and data["fingerprint"].startswith("SHA256:")
    assert stat.S_IMODE(os.stat(data["private"]).st_mode) == 0o600


def test_gen_text_output_names_paths_and_fingerprint(env):
    result = invoke("gen", "alice", "--kind", "user", "--dir", env / "k")
    assert result.exit_code == 0
    assert str(env / "k" / "alice.key") in result.stdout
    assert "fingerprint SHA256:" in result.stdout


def test_gen_refuses_overwrite_unless_forced(env):
    gen(env, "a")
    before = (env / "k" / "a.key").read_bytes()
    result = invoke("gen", "a", "--dir", env / "k")
    assert result.exit_code == 10
    assert result.stderr.strip() == (
        f"error: {env / 'k' / 'a.key'}: already exists (use --force to replace it)"
    )
    assert (env / "k" / "a.key").read_bytes() == before
    assert invoke("gen", "a", "--dir", env / "k", "--force").exit_code == 0
    assert (env / "k" / "a.key").read_bytes() != before


def test_gen_bad_name_and_kind(env):
    result = invoke("gen", "bad name")
    assert result.exit_code == 10 and "invalid name 'bad name'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert invoke("gen", "a", "--kind", "robot").exit_code == 2


# --- add ----------------------------------------------------------------------------------


def test_add_is_pending_unless_accepted(env):
    result = invoke("add", gen(env, "web-01"), gen(env, "web-02"))
    assert result.exit_code == 0, result.output
    assert "web-01: pending (SHA256:" in result.stdout
    result = invoke("add", gen(env, "alice", "user"), "--role", "writer", "--accept", "--json")
    (row,) = json.loads(result.stdout)
    assert (row["ok"], row["state"], row["role"]) == (True, "accepted", "writer")
    assert registry(env).get("web-02").state == "pending"


def test_add_reports_each_bad_file_and_adds_the_others(env):
    good = gen(env, "web-01")
    missing = env / "k" / "nope.pub"
    result = invoke("add", missing, good)
    assert result.exit_code == 1
    assert f"error: {missing}: no such key file" in result.stderr
    assert "web-01: pending" in result.stdout
    result = invoke("add", good, "--json")
    (row,) = json.loads(result.stdout)
    assert row == {
        "ok": False,
        "file": str(good),
        "error": "web-01 is already registered (pending); delete it first",
    }


def test_add_role_on_a_node_is_refused(env):
    result = invoke("add", gen(env, "n1"), "--role", "admin")
    # A bad argument: 2, as the table says and as the server answers it (was 1).
    assert result.exit_code == 2 and "only users have roles" in result.stderr
    assert invoke("add", gen(env, "n2"), "--role", "root").exit_code == 2


# --- list / show --------------------------------------------------------------------------


def test_list_table_json_and_filter(env):
    where = f"registry file {env / 'home' / 'registry.json'}"
    assert invoke("list").stdout.strip() == f"no keys ({where})"
    invoke("add", gen(env, "web-01"), gen(env, "web-02"))
    invoke("add", gen(env, "alice", "user"), "--accept")
    lines = invoke("list").stdout.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "ROLE", "STATE", "FINGERPRINT"]
    assert lines[1].split()[:3] == ["web-01", "node", "pending"]
    assert lines[3].split()[:4] == ["alice", "user", "reader", "accepted"]
    listed = json.loads(invoke("list", "--state", "pending", "--json").stdout)
    assert [e["name"] for e in listed] == ["web-01", "web-02"]
    assert set(listed[0]) >= {"name", "kind", "role", "state", "fingerprint", "curve_public"}
    assert (
        invoke("list", "--state", "denied").stdout.strip() == f"no keys in state denied ({where})"
    )
    assert [e["name"] for e in json.loads(invoke("list", "web-*", "--json").stdout)] == [
        "web-01",
        "web-02",
    ]


def test_list_bad_state_is_a_usage_error(env):
    assert invoke("list", "--state", "bogus").exit_code == 2


def test_show_with_denied_keys(env):
    invoke("add", gen(env, "web-01"), "--accept")
    impostor = generate("web-01", "node").public
    registry(env).present(
        "web-01", "node", impostor.ed25519_public, impostor.curve_public, auto_accept=True
    )
    shown = json.loads(invoke("show", "web-01", "--json").stdout)
    assert shown["key"]["state"] == "accepted"
    assert shown["key"]["fingerprint"].startswith("SHA256:")
    assert [d["fingerprint"] for d in shown["denied"]] == [impostor.fingerprint]
    text = invoke("show", "web-01").stdout
    assert "fingerprint  SHA256:" in text
    assert f"denied       {impostor.fingerprint}" in text


def test_show_unknown_is_not_found(env):
    result = invoke("show", "ghost")
    assert result.exit_code == 8
    assert result.stderr.startswith("error: no key named 'ghost'")


# --- accept / reject / delete / role -------------------------------------------------------


def test_accept_reject_report_each_change(env):
    invoke("add", gen(env, "a"), gen(env, "b"))
    result = invoke("accept", "a", "b")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["a: pending -> accepted", "b: pending -> accepted"]
    result = invoke("reject", "a", "--json")
    assert json.loads(result.stdout) == [
        {"ok": True, "name": "a", "previous": "accepted", "state": "rejected"}
    ]
    assert invoke("accept", "a").stdout.strip() == "a: rejected -> accepted"


def test_unknown_and_illegal_are_reported_after_doing_the_others(env):
    invoke("add", gen(env, "a"), gen(env, "b"))
    invoke("accept", "b")
    result = invoke("accept", "nobody", "b", "a")
    assert result.exit_code == 1
    assert "error: nobody: no key named 'nobody'" in result.stderr
    assert "error: b: cannot accept a key that is accepted" in result.stderr
    assert result.stdout.strip() == "a: pending -> accepted"
    result = invoke("reject", "nobody", "a", "--json")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert [r["ok"] for r in rows] == [False, True]
    assert rows[0]["name"] == "nobody" and "no key named" in rows[0]["error"]


def test_delete_with_yes_and_json(env):
    invoke("add", gen(env, "a"), gen(env, "b"))
    result = invoke("delete", "a", "--yes")
    assert result.exit_code == 0 and result.stdout.strip() == "a: pending -> deleted"
    result = invoke("delete", "b", "ghost", "-y", "--json")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)
    assert rows[0] == {"ok": True, "name": "b", "previous": "pending", "state": "deleted"}
    assert rows[1]["ok"] is False
    assert invoke("show", "b").exit_code == 8


def test_delete_asks_for_confirmation(env):
    invoke("add", gen(env, "a"))
    result = invoke("delete", "a", input="n\n")
    assert result.exit_code == 1 and "nothing deleted" in result.stderr
    assert invoke("show", "a").exit_code == 0
    assert invoke("delete", "a", input="y\n").exit_code == 0
    assert invoke("show", "a").exit_code == 8


def test_role(env):
    invoke("add", gen(env, "alice", "user"))
    assert invoke("role", "alice", "admin").stdout.strip() == "alice: role admin"
    assert json.loads(invoke("role", "alice", "writer", "--json").stdout)["role"] == "writer"
    assert invoke("role", "alice", "root").exit_code == 2
    assert invoke("role", "ghost", "admin").exit_code == 8


# --- registry location and errors ---------------------------------------------------------


def test_registry_option_and_env(env, monkeypatch):
    pubfile = gen(env, "a")
    explicit = env / "explicit.json"
    assert invoke("add", pubfile, "--registry", explicit).exit_code == 0
    assert KeyRegistry(explicit).get("a").state == "pending"
    monkeypatch.setenv("PUSHJOBS_KEY_REGISTRY", str(env / "from-env.json"))
    assert invoke("add", pubfile).exit_code == 0
    assert KeyRegistry(env / "from-env.json").find("a") is not None
    assert not (env / "home" / "registry.json").exists()


def test_corrupt_registry_is_one_line_and_untouched(env):
    reg = env / "reg.json"
    reg.write_text("{nope")
    for args in (("list",), ("accept", "a"), ("show", "a")):
        result = invoke(*args, "--registry", reg)
        assert result.exit_code == 10, args
        assert len(result.stderr.strip().splitlines()) == 1
        assert f"{reg}: corrupt key registry" in result.stderr
    assert reg.read_text() == "{nope"


@pytest.mark.parametrize("command", ["gen", "add", "list", "accept", "reject", "delete", "show"])
def test_help_has_an_example(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0
    assert f"Example: pushjobs key {command}" in result.stdout


def test_through_the_real_entry_point(env):
    result = subprocess.run(
        [sys.executable, "-m", "pushjobs.cli.app", "key", "gen", "n1", "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PUSHJOBS_HOME": str(env / "home")},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["name"] == "n1"
    assert (env / "home" / "keys" / "n1.key").exists()


def test_accept_takes_globs_and_all(env):
    invoke("add", gen(env, "web-01"), gen(env, "web-02"), gen(env, "db-01"))
    result = invoke("accept", "web-*")
    assert result.stdout.splitlines() == [
        "web-01: pending -> accepted",
        "web-02: pending -> accepted",
    ]
    result = invoke("accept", "mail-*")
    assert result.exit_code == 8 and "no key matches 'mail-*'" in result.stderr
    assert invoke("accept", "--all").stdout.strip() == "db-01: pending -> accepted"
    assert invoke("accept", "-A").exit_code == 8  # nothing pending any more
    assert invoke("accept").exit_code == 2  # neither names nor --all


def test_with_a_client_config_the_commands_ask_the_server(env, monkeypatch):
    config = env / "client.toml"
    config.write_text('[client]\nserver = "tcp://127.0.0.1:9"\n')
    monkeypatch.setenv("PUSHJOBS_CONFIG", str(config))
    result = invoke("list")
    # No registry file is read: the config is incomplete, and the error says what it needs.
    assert result.exit_code == 9 and "client.server_key" in result.stderr
    assert invoke("list", "--registry", env / "r.json").exit_code == 0


# --- the registry in the ordered log ------------------------------------------------------


def server_toml(env, **server):
    path = env / "server.toml"
    lines = ["[server]"]
    lines += [f'{key} = "{value}"' for key, value in server.items()]
    lines += ["[log]", 'backend = "sqlite"', f'path = "{env / "log.db"}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def test_server_config_works_on_the_servers_log_importing_its_file_first(env):
    first = env / "var" / "registry.json"
    KeyRegistry(first).add(generate("alice", "user").public, role="admin")
    config = server_toml(env, registry=first)
    result = invoke("add", gen(env, "web-01"), "--accept", "--server-config", config)
    assert result.exit_code == 0, result.output
    assert "imported 1 entries" in result.stderr
    assert not first.exists() and (env / "var" / "registry.json.imported").exists()
    result = invoke("list", "--json", "--server-config", config)
    rows = {r["name"]: r["state"] for r in json.loads(result.stdout)}
    assert rows == {"alice": "pending", "web-01": "accepted"}
    result = invoke("accept", "alice", "--server-config", config)
    assert result.exit_code == 0 and result.stdout.strip() == "alice: pending -> accepted"
    assert "imported" not in result.stderr  # once only
    result = invoke("list", "--state", "rejected", "--server-config", config)
    assert result.stdout.strip() == "no keys in state rejected (log topic pushjobs.keys)"


def test_a_registry_file_a_server_imported_is_refused_with_where_the_keys_went(env):
    path = env / "home" / "registry.json"
    KeyRegistry(path).add(generate("alice", "user").public, role="admin")
    assert invoke("list", "--server-config", server_toml(env, registry=path)).exit_code == 0
    result = invoke("add", gen(env, "web-01"), "--registry", path)
    assert result.exit_code != 0
    assert "imported into the ordered log" in result.stderr and "--server-config" in result.stderr
    assert not path.exists()  # not quietly created again
    result = invoke("list")  # the default file, the same one
    assert result.exit_code != 0 and "imported into the ordered log" in result.stderr


def test_server_config_with_a_file_store_uses_the_file(env):
    path = env / "reg.json"
    config = server_toml(env, registry=path, key_store="file")
    result = invoke("add", gen(env, "web-01"), "--server-config", config)
    assert result.exit_code == 0, result.output
    assert KeyRegistry(path).get("web-01").state.value == "pending"
    assert not (env / "log.db").exists()
    bad = server_toml(env, registry=path, key_store="nfs")
    result = invoke("list", "--server-config", bad)
    assert result.exit_code != 0 and "server.key_store" in result.stderr


def test_a_glob_over_pending_and_accepted_keys_accepts_the_pending_and_succeeds(env):
    invoke("add", gen(env, "web-1"), gen(env, "web-2"), gen(env, "web-3"))
    invoke("accept", "web-2")
    result = invoke("accept", "web-*")
    assert result.exit_code == 0, result.stderr  # it used to exit 1 after doing its work
    assert result.stdout.splitlines() == [
        "web-1: pending -> accepted",
        "web-2: already accepted",
        "web-3: pending -> accepted",
    ]
    result = invoke("accept", "web-*", "--json")
    assert result.exit_code == 0
    assert [(r["previous"], r["state"]) for r in json.loads(result.stdout)] == [
        ("accepted", "accepted")
    ] * 3


def test_an_unknown_name_alone_is_not_found_exit_8_as_key_show_says(env):
    invoke("add", gen(env, "a"))
    for action in ("accept", "reject"):
        result = invoke(action, "nosuch")
        assert result.exit_code == 8, (action, result.stderr)
        assert "no key named 'nosuch'" in result.stderr
    assert invoke("show", "nosuch").exit_code == 8
