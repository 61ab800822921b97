"""The agent's verdict on a commit: whitelist, captures and env policy together."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.agentconfig import AgentConfig
from agent.envpolicy import EnvPolicy
from agent.whitelist import parse
from agent.whitelist_file import WhitelistFile, refusal
from pushjobs.config import load_config
from pushjobs.errors import ConfigError
from pushjobs.protocol import messages as m

WL = parse(
    {
        "commands": {
            "true": "true",
            "with-path": {"command": "true", "env": ["PATH", "APP_*"]},
            "cat-(?P<f>.+)": "cat /srv/{f}",
        }
    },
    "wl.toml",
)


def commit(command: str = "true", env: dict[str, str] | None = None, **secret: str) -> m.Commit:
    options = m.RunOptions(env=env or {}, secret_env=secret)
    return m.Commit(
        sender="s", incarnation="i", sequence=1, timestamp=1, node="n", job_id="j",
        command=command, options=options,
    )  # fmt: skip


def test_an_ordinary_commit_is_accepted() -> None:
    assert refusal(WL, EnvPolicy(), commit(env={"GREETING": "hi"}, DB_PASSWORD="x")) is None


def test_a_refused_plain_or_secret_variable_is_named() -> None:
    assert "LD_PRELOAD" in (refusal(WL, EnvPolicy(), commit(env={"LD_PRELOAD": "/x"})) or "")
    assert "BASH_ENV" in (refusal(WL, EnvPolicy(), commit(BASH_ENV="/x")) or "")
    assert "not a valid variable name" in (refusal(WL, EnvPolicy(), commit(env={"": "x"})) or "")


def test_the_command_is_judged_before_its_env() -> None:
    assert (
        refusal(WL, EnvPolicy(), commit("rm", {"PATH": "/x"})) == "command 'rm' is not whitelisted"
    )
    reason = refusal(WL, EnvPolicy(), commit("cat-../etc/shadow"))
    assert reason is not None and "'..' path segment" in reason


def test_an_entry_env_list_replaces_the_agents_allow() -> None:
    agent = EnvPolicy(allow=("*",), deny=("APP_SECRET",))
    assert refusal(WL, agent, commit("with-path", {"PATH": "/opt/bin", "APP_X": "1"})) is None
    assert "allow list" in (refusal(WL, agent, commit("with-path", {"HOME": "/"})) or "")
    assert refusal(WL, agent, commit("with-path", {"APP_SECRET": "1"})) is not None
    assert refusal(WL, agent, commit("true", {"PATH": "/opt/bin"})) is not None


def test_the_whitelist_file_judges_with_the_agents_policy(tmp_path: Path) -> None:
    path = tmp_path / "whitelist.toml"
    path.write_text('[commands]\ntrue = "true"\n')
    strict = WhitelistFile(path, EnvPolicy(allow=("APP_*",)))
    assert strict.judge(commit(env={"APP_MODE": "x"})) is None
    assert "HOME" in (strict.judge(commit(env={"HOME": "/"})) or "")
    assert WhitelistFile(path).judge(commit(env={"HOME": "/"})) is None


def test_agent_toml_env_section_becomes_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[env]\nallow = ["PATH", "APP_*"]\ndeny = ["APP_SECRET"]\n')
    policy = load_config(AgentConfig, path, env={}).env.policy()
    assert policy.refusal("PATH") is None and policy.refusal("APP_MODE") is None
    assert policy.refusal("APP_SECRET") is not None and policy.refusal("HOME") is not None
    assert load_config(AgentConfig, None, env={}).env.policy() == EnvPolicy()


def test_a_bad_env_pattern_in_agent_toml_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[env]\ndeny = ["LD PRELOAD"]\n')
    with pytest.raises(ConfigError, match=r"env\.deny: 'LD PRELOAD' is not a variable name"):
        load_config(AgentConfig, path, env={})
