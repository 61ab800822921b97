from __future__ import annotations

import pytest

from agent.whitelist import load, parse
from pushjobs.errors import ConfigError

WHITELIST = {
    "commands": {
        "uptime": "uptime",
        "echo": "echo 'hello world'",
        "restart-(?P<svc>[a-z0-9-]+)": "systemctl restart {svc}",
        r"sleep-(?P<secs>\d+)": "sleep {secs}",
        "any-(?P<arg>.+)": "printf %s {arg}",
    }
}


@pytest.fixture
def wl():
    return parse(WHITELIST, "wl.toml")


def test_exact_names(wl):
    assert wl.resolve("uptime") == ["uptime"]
    assert wl.resolve("echo") == ["echo", "hello world"]


def test_regex_captures_are_substituted(wl):
    assert wl.resolve("restart-nginx") == ["systemctl", "restart", "nginx"]
    assert wl.resolve("sleep-5") == ["sleep", "5"]


def test_regex_must_match_the_whole_name(wl):
    assert wl.resolve("xrestart-nginx") is None
    assert wl.resolve("sleep-5x") is None


def test_unlisted_commands_are_refused(wl):
    assert wl.resolve("rm") is None
    assert wl.resolve("") is None


def test_unsafe_captures_are_refused_even_by_a_permissive_pattern(wl):
    assert wl.resolve("any-a;rm -rf /") is None
    assert wl.resolve("any-$(id)") is None
    assert wl.resolve("any-ok") == ["printf", "%s", "ok"]


def test_capture_stays_one_argv_word():
    wl = parse({"commands": {"say-(?P<w>[a-z]+)": "echo prefix-{w}"}}, "x")
    assert wl.resolve("say-hi") == ["echo", "prefix-hi"]


@pytest.mark.parametrize(
    ("table", "key", "problem"),
    [
        ({"commands": {"x": ""}}, "commands.x", "non-empty"),
        ({"commands": {"x": 3}}, "commands.x", "non-empty"),
        ({"commands": {"bad(": "x"}}, "commands.bad(", "invalid regular expression"),
        ({"commands": {"r-(?P<a>x)": "echo {b}"}}, "commands.r-(?P<a>x)", "placeholder {b}"),
        ({"commands": {"q": "echo 'unterminated"}}, "commands.q", "cannot split"),
        ({"commands": []}, "commands", "expected a table"),
        ({"cmds": {}}, "cmds", "unknown key"),
    ],
)
def test_bad_whitelists_name_the_key(table, key, problem):
    with pytest.raises(ConfigError) as info:
        parse(table, "wl.toml")
    assert info.value.key == key and problem in info.value.problem


def test_load_from_file(tmp_path):
    path = tmp_path / "whitelist.toml"
    path.write_text('[commands]\ntrue = "true"\n"x-(?P<n>[0-9]+)" = "echo {n}"\n')
    wl = load(path)
    assert wl.resolve("true") == ["true"]
    assert wl.resolve("x-42") == ["echo", "42"]
    assert wl.names() == ["true", "x-(?P<n>[0-9]+)"]


# --- captures that would change what the command means (issue 15, case 6) ----------------

CAPTURES = {
    "commands": {
        "cat-(?P<f>.+)": "cat /srv/files/{f}",
        "restart-(?P<svc>.+)": "systemctl restart {svc}",
        "show-(?P<svc>.+)": "systemctl restart {svc}",
        "tree-(?P<p>.+)": {"command": "ls /srv/{p}", "allow_dotdot": True},
        "opt-(?P<o>.+)": {"command": "tool {o}", "allow_dash": True},
    }
}


@pytest.mark.parametrize(
    ("requested", "problem"),
    [
        ("cat-../secret", "contains a '..' path segment"),
        ("cat-a/../../etc/shadow", "contains a '..' path segment"),
        ("cat-a/..", "contains a '..' path segment"),
        ("cat-..", "contains a '..' path segment"),
        ("show---help", "starts with '-'"),
        ("restart--x", "starts with '-'"),
        ("cat-a;b", "characters outside"),
    ],
)
def test_captures_that_climb_or_become_options_are_refused(requested, problem):
    wl = parse(CAPTURES, "wl.toml")
    assert wl.resolve(requested) is None
    reason = wl.lookup(requested)
    assert isinstance(reason, str) and problem in reason and repr(requested) in reason


@pytest.mark.parametrize(
    ("requested", "argv"),
    [
        ("cat-notes.txt", ["cat", "/srv/files/notes.txt"]),
        ("cat-a...b", ["cat", "/srv/files/a...b"]),  # three dots are a name, not a climb
        ("cat-sub/x-y", ["cat", "/srv/files/sub/x-y"]),  # '-' inside is fine
        ("tree-../up", ["ls", "/srv/../up"]),  # the entry opted in
        ("opt---help", ["tool", "--help"]),  # the entry opted in
    ],
)
def test_safe_captures_and_opted_in_entries_resolve(requested, argv):
    assert parse(CAPTURES, "wl.toml").resolve(requested) == argv


def test_an_opt_in_covers_only_what_it_names():
    wl = parse(CAPTURES, "wl.toml")
    assert wl.resolve("tree--x") is None  # dotdot allowed, not a leading dash
    assert wl.resolve("opt-../x") is None  # dash allowed, not a climb


# --- entries written as tables --------------------------------------------------------------


def test_a_table_entry_keeps_its_env_list_and_a_string_entry_has_none():
    wl = parse(
        {"commands": {"deploy": {"command": "deploy now", "env": ["APP_*", "PATH"]}, "up": "up"}},
        "wl.toml",
    )
    found = wl.lookup("deploy")
    assert not isinstance(found, str)
    assert found.argv == ["deploy", "now"] and found.rule.env == ("APP_*", "PATH")
    up = wl.lookup("up")
    assert not isinstance(up, str) and up.rule.env is None


@pytest.mark.parametrize(
    ("entry", "key", "problem"),
    [
        ({"env": ["A"]}, "commands.x.command", "non-empty command line"),
        ({"command": "true", "envs": []}, "commands.x.envs", "unknown key"),
        ({"command": "true", "env": "A"}, "commands.x.env", "expected a list"),
        ({"command": "true", "env": ["A B"]}, "commands.x.env", "not a variable name"),
        ({"command": "true", "allow_dash": "yes"}, "commands.x.allow_dash", "true or false"),
    ],
)
def test_bad_table_entries_name_the_key(entry, key, problem):
    with pytest.raises(ConfigError) as info:
        parse({"commands": {"x": entry}}, "wl.toml")
    assert info.value.key == key and problem in info.value.problem


def test_table_entries_load_from_a_file(tmp_path):
    path = tmp_path / "whitelist.toml"
    path.write_text(
        '[commands]\ntrue = "true"\n\n'
        '[commands."cat-(?P<f>.+)"]\ncommand = "cat /srv/{f}"\nallow_dotdot = true\n'
    )
    wl = load(path)
    assert wl.resolve("true") == ["true"]
    assert wl.resolve("cat-../x") == ["cat", "/srv/../x"]
