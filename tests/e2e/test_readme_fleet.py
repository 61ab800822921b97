"""The README's "Running a real fleet", run as written: its own code blocks, in order.

Every ```toml block is written to the file its first line names; every ```sh line is run
by bash (``NAME=$(...)`` keeps its output for the lines after it), and the daemons it
starts (``pushjobs-server``, ``pushjobs-agent``) run in the background until the test
ends. Only what must differ on a test machine is replaced, all in ``replacements``: the
hosts become 127.0.0.1, the ports free ones, ``/etc/pushjobs`` and ``/var/lib/pushjobs``
directories of the test, and ``~`` a home of the test. Two waits stand for a person
reading the output before going on (``WAITS``): a node's key is accepted once it is
pending, and jobs start once the node is online. If the README changes, this test runs
the new text; if a command in it cannot work, this test fails.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from pushjobs.childproc import Proc, await_ready, spawn, stop_all
from pushjobs.sandbox import free_port
from tests.support import wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Running a real fleet"
DAEMONS = ("pushjobs-server", "pushjobs-agent")
BLOCK = re.compile(r"^```(toml|sh)\n(.*?)^```", re.MULTILINE | re.DOTALL)
ASSIGNMENT = re.compile(r"^([A-Z_]+)=\$\((.*)\)$")


def section(text: str) -> str:
    """The section's text, up to the next heading of its level or one below."""
    start = text.index(SECTION)
    end = re.search(r"^#{2,3} ", text[start + len(SECTION) :], re.MULTILINE)
    return text[start : start + len(SECTION) + end.start()] if end else text[start:]


def blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(section(text))]


def replacements(root: Path) -> list[tuple[str, str]]:
    """What differs on a test machine: hosts, ports, two directories. Nothing else."""
    ports = {port: str(free_port()) for port in ("7700", "7701", "7702", "7800")}
    return [
        ("0.0.0.0", "127.0.0.1"),
        ("10.0.0.5", "127.0.0.1"),
        ("10.0.0.21", "127.0.0.1"),
        *((f"127.0.0.1:{port}", f"127.0.0.1:{free}") for port, free in ports.items()),
        ("/etc/pushjobs", str(root / "etc")),
        ("/var/lib/pushjobs", str(root / "var")),
    ]


def environment(root: Path) -> dict[str, str]:
    """A user on a fresh machine: no pushjobs variables, a home of its own; the daemons'
    default directories moved where ``replacements`` moved them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PUSHJOBS_", "XDG_"))}
    env["HOME"] = str(root / "home")
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PUSHJOBS_CONFIG_DIR"] = str(root / "etc")  # /etc/pushjobs
    env["PUSHJOBS_HOME"] = str(root / "var")  # /var/lib/pushjobs, the agent's state as root
    return env


class Walkthrough:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.replace = replacements(root)
        self.env = environment(root)
        self.procs: list[Proc] = []
        self.outputs: dict[str, str] = {}
        (root / "home").mkdir(parents=True)
        (root / "logs").mkdir()

    def apply(self, text: str) -> str:
        for old, new in self.replace:
            text = text.replace(old, new)
        return text

    def write(self, block: str) -> None:
        first = block.splitlines()[0]
        assert first.startswith("# "), f"a toml block names its file first: {first!r}"
        name = first[2:].split()[0].rstrip(":")
        path = Path(self.apply(name).replace("~", self.env["HOME"], 1))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.apply(block))

    def run(self, line: str) -> None:
        command = self.apply(line)
        word = command.split()[0]
        if word in DAEMONS:
            self.start(word, command)
            return
        for prefix, ready in WAITS.items():
            if command.startswith(prefix):
                wait_until(partial(ready, self), 30.0, 0.2)
        assignment = ASSIGNMENT.match(command)
        result = self.bash(assignment.group(2) if assignment else command)
        assert result.returncode == 0, f"{line}\nexit {result.returncode}\n{result.stderr}"
        self.outputs[line] = result.stdout
        if assignment:
            self.env[assignment.group(1)] = result.stdout.strip()

    def bash(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.root,
            timeout=120,
            check=False,
        )

    def start(self, name: str, command: str) -> None:
        log = self.root / "logs" / f"{name}.log"
        proc = spawn(name, shlex.split(command), log, env=self.env, cwd=self.root)
        self.procs.append(proc)
        await_ready(proc, name, 30.0)

    def json(self, command: str) -> object:
        result = self.bash(f"{command} --json")
        return json.loads(result.stdout) if result.returncode == 0 else None

    def close(self) -> None:
        stop_all(self.procs, 5.0)


def pending(walk: Walkthrough) -> bool:
    keys = walk.json("pushjobs key list --state pending")
    return isinstance(keys, list) and any(k["name"] == "web-01" for k in keys)


def online(walk: Walkthrough) -> bool:
    nodes = walk.json("pushjobs node list")
    return isinstance(nodes, dict) and all(n["online"] for n in nodes["nodes"])


WAITS: dict[str, Callable[[Walkthrough], bool]] = {
    "pushjobs key accept": pending,
    "pushjobs job start": online,
}


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walkthrough]:
    walk = Walkthrough(tmp_path)
    try:
        yield walk
    finally:
        walk.close()


def test_the_readme_fleet_runs_as_written(walk: Walkthrough) -> None:
    found = blocks(README.read_text())
    assert [kind for kind, _ in found].count("sh") >= 2, "the section lost its commands"
    for kind, body in found:
        if kind == "toml":
            walk.write(body)
            continue
        for line in body.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                walk.run(line.strip())
    assert [p.name for p in walk.procs] == ["pushjobs-server", "pushjobs-agent"]
    assert all(p.alive() for p in walk.procs)
    listed = next(out for line, out in walk.outputs.items() if line == "pushjobs node list")
    assert "web-01" in listed
    watched = next(out for line, out in walk.outputs.items() if "--watch" in line)
    assert "complete: 1 succeeded" in watched
    shown = next(out for line, out in walk.outputs.items() if "job output" in line)
    assert "load average" in shown
    aborted = next(out for line, out in walk.outputs.items() if "job abort" in line)
    assert "aborted" in aborted
