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
