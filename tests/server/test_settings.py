"""The server's [jobs] settings: the memory bounds on finished jobs."""

from __future__ import annotations

import pytest

from pushjobs.config import load_config
from pushjobs.errors import ConfigError
from server.shell.serverconfig import ServerConfig


def test_finished_job_bounds_are_read_from_the_file(tmp_path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("[jobs]\nkeep_finished = 50\nkeep_finished_nodes = 200000\n")
    jobs = load_config(ServerConfig, path, env={}).jobs
    assert (jobs.keep_finished, jobs.keep_finished_nodes) == (50, 200_000)


def test_a_zero_node_budget_is_refused_by_name(tmp_path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("[jobs]\nkeep_finished_nodes = 0\n")
    with pytest.raises(ConfigError, match="keep_finished_nodes") as info:
        load_config(ServerConfig, path, env={})
    assert "must be at least 1" in str(info.value)


@pytest.mark.parametrize("value", ["1e17", "31536001", "nan", "0"])
@pytest.mark.parametrize("setting", ["run_timeout_s", "vote_timeout_s"])
def test_a_default_timeout_beyond_a_year_is_refused_by_name(
    tmp_path, setting: str, value: str
) -> None:
    """Every job naming no timeout of its own would take it: beyond a year its deadline
    outgrows the log's 64-bit milliseconds and no such job could be recorded."""
    path = tmp_path / "server.toml"
    path.write_text(f"[jobs]\n{setting} = {value}\n")
    with pytest.raises(ConfigError, match=setting) as info:
        load_config(ServerConfig, path, env={})
    assert "at most a year" in str(info.value)


def test_a_default_timeout_of_a_year_is_taken(tmp_path) -> None:
    path = tmp_path / "server.toml"
    path.write_text("[jobs]\nrun_timeout_s = 31536000\n")
    assert load_config(ServerConfig, path, env={}).jobs.run_timeout_s == 31_536_000
