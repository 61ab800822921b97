"""Running the docs' recipes as written: a page's (or one section's) code blocks, in order.

Each page under ``docs/`` is read from its own file (``blocks(page, heading)``), so a
recipe is tested from the text it lives in. A ```toml or ```dotenv block is written to
the file its first comment line names (a toml block may name several:
``# ~/.config/pushjobs/config.toml`` starts the next file); its directory must exist
already, as for a reader's editor (an earlier block makes it). A toml file that exists
already gets only the keys the block shows, the lines a reader changes. Every ```sh line
is run by bash, with its ``\\`` continuations joined (``NAME=$(...)`` keeps its output for
the lines after it, ``export NAME=VALUE`` its value), and the long-running programs it
starts (``DAEMONS``) run in the background until the test ends, each waited for until its
ready line.

Only what must differ on a test machine is replaced, all in ``replacements``: the hosts
become 127.0.0.1, the ports free ones, ``/etc/pushjobs`` and ``/var/lib/pushjobs``
directories of the test, ``~`` a home of the test, ``.venv/bin/`` this
interpreter's directory. A test adds its own (a smaller fleet) and says why. Waits stand
for a person reading the output before going on (``waits``: a line starting with a key
runs once its condition holds). If a page changes, the tests run the new text; if a
command in it cannot work, they fail.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from pushjobs.testbed.childproc import Proc, await_ready, spawn, stop_all
from pushjobs.testbed.sandbox import free_port
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FLEET_PAGE = DOCS / "fleet.md"
FLEET = "## Running a real fleet"
# The programs a recipe leaves running, and the first word of each one's ready line.
DAEMONS = {
    "pushjobs-server": "pushjobs-server",
    "pushjobs-agent": "pushjobs-agent",
    "pushjobs-edge": "pushjobs-edge",
    "pushjobs simulate run": "pushjobs-simulate",
}
BLOCK = re.compile(r"^```(toml|dotenv|sh)\n(.*?)^```", re.MULTILINE | re.DOTALL)
ASSIGNMENT = re.compile(r"^([A-Z_]+)=\$\((.*)\)$")
EXPORT = re.compile(r"^export ([A-Z_]+)=(.*)$")
FILE_LINE = re.compile(r"^# ([~/]\S*\.(?:toml|env)):?(\s|$)")
KEY_LINE = re.compile(r"^([A-Za-z0-9_.\"-]+)\s*=")
# The docs' ports: server A, server B (``server-b.toml``), the node, the metrics.
PORTS = ("7700", "7701", "7702", "7710", "7711", "7712", "7730", "7800", "9464", "9465", "9466")

Wait = Callable[["Walkthrough"], bool]


def section(text: str, heading: str) -> str:
    """The section's text, up to the next heading of its level or one below."""
    start = text.index(heading)
    end = re.search(r"^#{2,3} ", text[start + len(heading) :], re.MULTILINE)
    return text[start : start + len(heading) + end.start()] if end else text[start:]


def blocks(page: Path, heading: str | None = None) -> list[tuple[str, str]]:
    """The code blocks of ``page`` (a file under ``docs/``, or the README), in order: all
    of them, or those of the section under ``heading``."""
    text = page.read_text()
    part = text if heading is None else section(text, heading)
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(part)]


def blocks_before(page: Path, heading: str) -> list[tuple[str, str]]:
    """The code blocks of ``page`` above ``heading`` (the sections before it)."""
    text = page.read_text()
    part = text[: text.index(heading)]
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(part)]


def properties(page: Path, heading: str) -> dict[str, str]:
    """The ``key=value`` lines of the section's ```properties block (a broker's config)."""
    text = section(page.read_text(), heading)
    found = re.search(r"^```properties\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert found, f"{page.name}: no properties block under {heading!r}"
    pairs = (
        line.split("=", 1)
        for line in found.group(1).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def commands(body: str) -> list[str]:
    """A sh block's commands: continuations joined, blank and comment lines dropped."""
    joined = re.sub(r"\\\n\s*", "", body)
    return [
        line.strip()
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def files(body: str) -> list[tuple[str, str]]:
    """A file block's files: each starts at a comment line naming it."""
    found: list[tuple[str, list[str]]] = []
    for line in body.splitlines(keepends=True):
        named = FILE_LINE.match(line)
        if named:
            found.append((named.group(1), []))
        assert found, f"a toml block names its file first: {line!r}"
        found[-1][1].append(line)
    return [(name, "".join(lines)) for name, lines in found]


def replacements(root: Path) -> list[tuple[str, str]]:
    """What differs on a test machine: hosts, ports, directories. Nothing else."""
    ports = {port: str(free_port()) for port in PORTS}
    return [
        ("0.0.0.0", "127.0.0.1"),
        ("10.0.0.5", "127.0.0.1"),
        ("10.0.0.21", "127.0.0.1"),
        *((f"127.0.0.1:{port}", f"127.0.0.1:{free}") for port, free in ports.items()),
        ("/etc/pushjobs", str(root / "etc")),
        ("/var/lib/pushjobs", str(root / "var")),
        (".venv/bin/", f"{Path(sys.executable).parent}/"),
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
    def __init__(
        self,
        root: Path,
        waits: Mapping[str, Wait] | None = None,
        extra: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.root = root
        self.replace = [*extra, *replacements(root)]
        self.env = environment(root)
        self.waits = dict(waits or {})
        self.procs: list[Proc] = []
        self.commands: dict[int, str] = {}  # id(proc): its command line
        self.outputs: dict[str, str] = {}
        (root / "home").mkdir(parents=True)
        (root / "logs").mkdir()

    def apply(self, text: str) -> str:
        for old, new in self.replace:
            text = text.replace(old, new)
        return text

    def path(self, name: str) -> Path:
        return Path(self.apply(name).replace("~", self.env["HOME"], 1))

    def write(self, block: str, kind: str = "toml") -> list[Path]:
        """Each file the block names: written whole, or, if a toml file exists, its keys
        changed. Its directory must be there already, as for a reader's editor."""
        written = []
        for name, text in files(block):
            path = self.path(name)
            assert path.parent.is_dir(), f"{name}: its directory is made by no earlier block"
            body = self.apply(text)
            exists = path.exists() and kind == "toml"
            path.write_text(merge(path.read_text(), body) if exists else body)
            written.append(path)
        return written

    def block(self, kind: str, body: str) -> None:
        if kind != "sh":
            self.write(body, kind)
            return
        for line in commands(body):
            self.run(line)

    def run(self, line: str, codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
        command = self.apply(line)
        daemon = next((d for d in DAEMONS if command.startswith(d)), None)
        if daemon:
            self.start(daemon, command)
            return subprocess.CompletedProcess(command, 0, "", "")
        for prefix, ready in self.waits.items():
            if command.startswith(prefix):
                wait_until(partial(ready, self), 30.0, 0.2)
        exported = EXPORT.match(command)
        if exported:
            # What bash makes of the value, kept for the lines after it.
            command = f"printf %s {exported.group(2)}"
        assignment = ASSIGNMENT.match(command)
        result = self.bash(assignment.group(2) if assignment else command)
        assert result.returncode in codes, f"{line}\nexit {result.returncode}\n{result.stderr}"
        self.outputs[line] = result.stdout
        if assignment:
            self.env[assignment.group(1)] = result.stdout.strip()
        if exported:
            self.env[exported.group(1)] = result.stdout
        return result

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

    def start(self, daemon: str, command: str) -> Proc:
        name = DAEMONS[daemon]
        log = self.root / "logs" / f"{name}-{len(self.procs)}.log"
        # A simulator reads control lines on stdin, a terminal's that stays open.
        argv = shlex.split(command, comments=True)
        proc = spawn(name, argv, log, env=self.env, cwd=self.root, stdin=daemon != name)
        self.procs.append(proc)
        self.commands[id(proc)] = command
        await_ready(proc, name, 30.0)
        return proc

    def daemon(self, name: str, index: int = 0) -> Proc:
        """The ``index``-th process started under ``name`` (``pushjobs-server``...)."""
        return [p for p in self.procs if p.name == name][index]

    def restart(self, proc: Proc) -> Proc:
        """Stop ``proc`` (SIGTERM, a clean stop) and start its command again."""
        stop_all([proc], 5.0)
        command = self.commands[id(proc)]
        return self.start(next(d for d in DAEMONS if command.startswith(d)), command)

    def json(self, command: str) -> object:
        result = self.bash(f"{command} --json")
        return json.loads(result.stdout) if result.returncode == 0 else None

    def output(self, prefix: str) -> str:
        """What the first line run that starts with ``prefix`` printed (``.venv/bin/``
        aside)."""
        return next(
            out
            for line, out in self.outputs.items()
            if line.removeprefix(".venv/bin/").startswith(prefix)
        )

    def close(self) -> None:
        stop_all(self.procs, 5.0)


def merge(existing: str, fragment: str) -> str:
    """``existing`` with each ``key = value`` line of ``fragment`` put in its table: the
    line of that key replaced, or added under the table's header (the table added at the
    end if the file has none)."""
    lines = existing.splitlines()
    table = ""
    for line in fragment.splitlines():
        if line.startswith("["):
            table = line.strip()
            continue
        key = KEY_LINE.match(line)
        if key:
            lines = put(lines, table, key.group(1), line)
    return "\n".join(lines) + "\n"


def put(lines: list[str], table: str, key: str, new: str) -> list[str]:
    if table and table not in lines:
        return [*lines, "", table, new]  # a table the file has not got yet: added at its end
    start = lines.index(table) + 1 if table else 0
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))
    for i in range(start, end):
        found = KEY_LINE.match(lines[i])
        if found and found.group(1) == key:
            return [*lines[:i], new, *lines[i + 1 :]]
    return [*lines[:start], new, *lines[start:]]


def pending(name: str) -> Wait:
    def ready(walk: Walkthrough) -> bool:
        keys = walk.json("pushjobs key list --state pending")
        return isinstance(keys, list) and any(k["name"] == name for k in keys)

    return ready


def online(walk: Walkthrough) -> bool:
    nodes = walk.json("pushjobs node list")
    return isinstance(nodes, dict) and all(n["online"] for n in nodes["nodes"])


FLEET_WAITS: dict[str, Wait] = {
    "pushjobs key accept": pending("web-01"),
    "pushjobs job start": online,
}


def set_up_fleet(walk: Walkthrough, after_files: Callable[[], None] | None = None) -> None:
    """docs/fleet.md's "Running a real fleet" up to its node accepted and online: one
    server, the node ``web-01``, the operator ``alice``; the pages that build on it start
    here. ``after_files`` runs after each file block (a page's own lines that go in every
    config before the first start: the log on Kafka)."""
    for kind, body in blocks(FLEET_PAGE, FLEET):
        if kind == "sh" and commands(body)[0].startswith("pushjobs node list"):
            break  # "Then:": the jobs
        walk.block(kind, body)
        if kind != "sh" and after_files is not None:
            after_files()
    wait_until(partial(online, walk), 30.0, 0.2)
