"""The agent's env policy: which variables a job may set (issue 15, case 5)."""

from __future__ import annotations

import pytest

from agent.envpolicy import EnvPolicy, check_patterns

DEFAULT = EnvPolicy()


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("LD_PRELOAD", "LD_*"),
        ("LD_AUDIT", "LD_*"),
        ("LD_LIBRARY_PATH", "LD_*"),
        ("PATH", "PATH"),
        ("MANPATH", "*PATH"),
        ("PYTHONPATH", "*PATH"),
        ("PYTHONSTARTUP", "PYTHON*"),
        ("BASH_ENV", "BASH_ENV"),
        ("ENV", "ENV"),
        ("IFS", "IFS"),
    ],
)
def test_the_default_refuses_what_changes_what_runs(name: str, pattern: str) -> None:
    reason = DEFAULT.refusal(name)
    assert reason is not None and name in reason and repr(pattern) in reason


@pytest.mark.parametrize("name", ["", "1A", "A-B", "A B", "A=B", "É", "A\nB", "ab.c"])
def test_a_name_that_is_not_an_identifier_is_refused_whatever_is_allowed(name: str) -> None:
    assert DEFAULT.refusal(name) is not None
    assert EnvPolicy(allow=(name, "*")).refusal(name) is not None


@pytest.mark.parametrize("name", ["DB_HOST", "_private", "lower_case", "A1", "ENVIRONMENT"])
def test_ordinary_names_pass_the_default(name: str) -> None:
    assert DEFAULT.refusal(name) is None


def test_a_name_written_in_full_in_allow_passes_a_deny_pattern_but_a_glob_does_not() -> None:
    assert EnvPolicy(allow=("PATH", "*")).refusal("PATH") is None
    assert EnvPolicy(allow=("PA*",)).refusal("PATH") is not None
    assert EnvPolicy(allow=("PATH",)).refusal("LD_PRELOAD") is not None


def test_allow_restricts_and_deny_adds_to_the_built_in_list() -> None:
    policy = EnvPolicy(allow=("APP_*", "LANG"), deny=("APP_SECRET*",))
    assert policy.refusal("APP_MODE") is None
    assert policy.refusal("LANG") is None
    assert "allow list" in (policy.refusal("HOME") or "")
    assert "APP_SECRET*" in (policy.refusal("APP_SECRET_KEY") or "")
    assert EnvPolicy(deny=("AWS_*",)).refusal("LD_PRELOAD") is not None


def test_first_refusal_names_the_variable_and_is_stable() -> None:
    assert DEFAULT.first_refusal(["OK", "PATH", "LD_PRELOAD"]) == (
        "env LD_PRELOAD is refused by this node's env policy (matches 'LD_*')"
    )
    assert DEFAULT.first_refusal(["OK", "ALSO_OK"]) is None
    assert DEFAULT.first_refusal([]) is None


def test_a_per_command_allow_replaces_the_agents_but_keeps_its_deny() -> None:
    agent = EnvPolicy(allow=("*",), deny=("AWS_*",))
    entry = agent.with_allow(("PATH", "AWS_*", "X"))
    assert entry.refusal("PATH") is None
    assert entry.refusal("HOME") is not None
    assert entry.refusal("AWS_KEY") is not None
    assert agent.with_allow(None) is agent


@pytest.mark.parametrize(
    ("patterns", "ok"),
    [(["A", "B_*", "?X", "[AB]C"], True), ([""], False), (["A B"], False), ([3], False)],
)
def test_patterns_are_names_or_globs_of_them(patterns: list[object], ok: bool) -> None:
    assert (check_patterns(patterns) is None) is ok
