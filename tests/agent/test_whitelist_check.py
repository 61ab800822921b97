"""The whitelist an agent starts with: refused, naming file, line and problem, when it is
missing or does not parse; and the same line named when a reload is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.whitelist_file import WhitelistFile, check, entry_line
from pushjobs.errors import ConfigError

GOOD = '[commands]\nuptime = "uptime"\n'


def test_a_good_whitelist_is_returned(tmp_path: Path) -> None:
    path = tmp_path / "whitelist.toml"
    path.write_text(GOOD)
    assert check(path).names() == ["uptime"]


def test_a_missing_whitelist_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"whitelist\.toml: file not found: an agent needs"):
        check(tmp_path / "whitelist.toml")


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        (GOOD + '"bad-(?P<x>[a-z]+" = "echo {x}"\n', 3, "invalid regular expression"),
        (GOOD + "\n[commands.'t-(?P<y>.+)']\ncommand = 'echo {z}'\n", 4, "placeholder {z}"),
        (GOOD + '[commands.table]\ncommand = "x"\nenv = "LANG"\n', 3, "expected a list"),
        ('[commands]\nuptime = "uptime\n', 2, "invalid TOML"),
    ],
)
def test_a_broken_whitelist_names_its_line(
    tmp_path: Path, text: str, line: int, problem: str
) -> None:
    path = tmp_path / "whitelist.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        check(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ")
    assert problem in message
    assert "(at line" not in message  # said once, in the path


def test_an_entry_not_found_in_the_text_keeps_the_path_alone(tmp_path: Path) -> None:
    path = tmp_path / "whitelist.toml"
    path.write_text(GOOD)
    assert entry_line(path, "nowhere") is None
    assert entry_line(tmp_path / "missing.toml", "uptime") is None


def test_a_refused_reload_names_the_line_and_keeps_the_whitelist(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "whitelist.toml"
    path.write_text(GOOD)
    current = WhitelistFile(path)
    path.write_text(GOOD + '"bad-(" = "x"\n')
    with caplog.at_level(logging.ERROR, logger="pushjobs.agent"):
        current.refresh(force=True)
    assert current.current.names() == ["uptime"]
    assert f"{path}:3: commands.bad-(: invalid regular expression" in caplog.text
