"""Every ``--help`` shows what its text says: Rich takes ``[word]`` for markup and drops it,
so a TOML table named in a help text (``[report]``, ``[log]``) must be escaped there."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from pushjobs.cli.app import app

TABLE = re.compile(r"\[([a-z_.]+)\]")


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(command, "commands", {}).items():  # a group's
        yield from commands(sub, (*path, name))


def test_every_help_shows_the_tables_its_text_names() -> None:
    root = typer.main.get_command(app)
    checked = 0
    for path in commands(root):
        command: Any = root
        for name in path:
            command = command.commands[name]
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        named = {f"[{word}]" for text in texts for word in TABLE.findall(text)}
        if not named:
            continue
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"}).output
        assert not [t for t in named if t not in shown], (path, named, shown)
        checked += 1
    assert checked >= 4  # report, archive, log's commands: the test looks where it should
