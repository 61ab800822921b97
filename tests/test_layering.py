"""Layering: imports go down the layers of the design, and the pure parts import no I/O.

From the bottom up:

1. the foundations in ``pushjobs/``: errors, clock, config, the protocol core, the transport,
   the ordered log, the states and the quorum, the pipeline. They import no ``keys/``;
2. ``keys/``: identities, key files, the registry. It imports only the foundations it
   stands on (``pushjobs.errors``, ``pushjobs.clock``, ``pushjobs.log``);
3. the toolkit in ``pushjobs/``: the API client (``pushjobs.api``), the CLI
   (``pushjobs.cli``) and the test bed (``pushjobs.testbed``), which may use ``keys/``;
4. the daemons, ``server/`` and ``agent/``, which never import each other and which nothing
   below imports. The toolkit starts them as processes (``python -m server``), never by
   import: every ``-m`` module name in the toolkit is checked to be a daemon's entry point;
5. inside ``server/``: the pure core (``server.core``) imports neither the shell
   (``server.shell``) nor the front (``server.front``); the shell does not import the
   front; only the wiring (``server.serverd``, ``server.__main__``) imports all three;
   the edge (``server.edge``, a process of its own that the leader starts by name) stands
   on all three and nothing imports it.

The protocol core and the state machines import no socket, database, clock or thread
module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"zmq", "sqlite3", "time", "threading", "socket", "asyncio", "subprocess"}
PURE_DIRS = [ROOT / "pushjobs" / "protocol", ROOT / "pushjobs" / "audit", ROOT / "server" / "core"]
PURE_MODULES = [
    ROOT / "pushjobs" / "states.py",
    ROOT / "pushjobs" / "quorum.py",
    ROOT / "server" / "front" / "watches.py",
    ROOT / "agent" / "runner.py",
    ROOT / "agent" / "rediscovery.py",
    ROOT / "agent" / "envpolicy.py",
    ROOT / "agent" / "simulator" / "simnode.py",
    ROOT / "agent" / "simulator" / "simleader.py",
]
PACKAGES = ("pushjobs", "keys", "server", "agent")  # the top level the design card fixes
# Package (a dotted prefix) -> dotted prefixes of this project it must never import.
NEVER = {
    "pushjobs": {"server", "agent"},
    "keys": {"server", "agent", "pushjobs"},
    "server": {"agent"},
    "agent": {"server"},
    "server.core": {
        "server.shell",
        "server.front",
        "server.serverd",
        "server.__main__",
        "server.edge",
    },
    "server.shell": {"server.front", "server.serverd", "server.__main__", "server.edge"},
    "server.front": {"server.serverd", "server.__main__", "server.edge"},
    "server.serverd": {"server.edge"},
    "server.edge": {"server.serverd", "server.__main__"},
}
# ... except for these: what may cross a line above, and why.
ALLOWED = {
    # keys/ stands on the foundations it needs and on nothing else of pushjobs/.
    "keys": {"pushjobs.errors", "pushjobs.clock", "pushjobs.log"},
}
# The only parts of pushjobs/ that may import keys/ (the toolkit above it).
KEY_USERS = {"pushjobs.api", "pushjobs.cli", "pushjobs.testbed"}
# What the toolkit may start with ``python -m``: the daemons' entry points (setup.cfg's
# console scripts: server.edge.standalone is pushjobs-edge) and its own.
ENTRY_POINTS = {"server", "agent", "agent.simulator", "pushjobs.cli.app", "server.edge.standalone"}


def _module_of(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, prefixes: set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _imports(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, at any depth (lazy imports too); for
    ``from a import b``, both ``a`` and ``a.b`` (``b`` may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _violations(root: Path) -> list[str]:
    found = []
    # The project's packages only: ``root`` also holds a virtualenv (thousands of files,
    # half a minute to parse) and the tests.
    sources = [p for top in PACKAGES if (root / top).is_dir() for p in (root / top).rglob("*.py")]
    for path in sorted(sources):
        module = _module_of(root, path)
        imported = _imports(path)
        for package, forbidden in NEVER.items():
            if not _within(module, {package}):
                continue
            allowed = ALLOWED.get(package, set())
            for name in sorted(imported):
                if _within(name, forbidden) and not _within(name, allowed):
                    found.append(f"{path.relative_to(root)} imports {name}")
        if _within(module, {"pushjobs"}) and not _within(module, KEY_USERS):
            found += [
                f"{path.relative_to(root)} imports {name}"
                for name in sorted(imported)
                if _within(name, {"keys"})
            ]
    return sorted(set(found))


def _started_modules(path: Path) -> list[str]:
    """The module names a file starts with ``-m``: a string constant right after ``"-m"``
    in a list, a tuple or a call's arguments."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        items = node.elts if isinstance(node, ast.List | ast.Tuple) else None
        if isinstance(node, ast.Call):
            items = node.args
        for first, second in zip(items or [], (items or [])[1:], strict=False):
            if (
                isinstance(first, ast.Constant)
                and first.value == "-m"
                and isinstance(second, ast.Constant)
                and isinstance(second.value, str)
            ):
                found.append(second.value)
    return found


def _module_exists(root: Path, name: str) -> bool:
    base = root.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__main__.py").exists()


PURE_FILES = sorted(p for d in PURE_DIRS for p in d.rglob("*.py")) + PURE_MODULES


def test_imports_go_down_the_layers_only():
    assert _violations(ROOT) == []


def test_the_layering_check_catches_an_upward_import(tmp_path):
    for package in ("pushjobs/cli", "pushjobs/log", "keys", "agent", "server/core", "server/shell"):
        (tmp_path / package).mkdir(parents=True)
    (tmp_path / "pushjobs" / "ok.py").write_text("from pushjobs.states import JobState\n")
    (tmp_path / "pushjobs" / "cli" / "ok.py").write_text("from keys import files\n")
    (tmp_path / "pushjobs" / "cli" / "up.py").write_text(
        "def f():\n    from server.core.job import Job\n    return Job\n"
    )
    (tmp_path / "pushjobs" / "log" / "up.py").write_text("from keys.registry import KeyRegistry\n")
    (tmp_path / "keys" / "ok.py").write_text("from pushjobs.log.base import OrderedLog\n")
    (tmp_path / "keys" / "up.py").write_text("from pushjobs.cli import render\n")
    (tmp_path / "agent" / "x.py").write_text("import server.serverd\n")
    (tmp_path / "server" / "core" / "x.py").write_text("from server.shell import channels\n")
    (tmp_path / "server" / "shell" / "x.py").write_text("from server.front.api import Api\n")
    assert _violations(tmp_path) == [
        "agent/x.py imports server.serverd",
        "keys/up.py imports pushjobs.cli",
        "keys/up.py imports pushjobs.cli.render",
        "pushjobs/cli/up.py imports server.core.job",
        "pushjobs/cli/up.py imports server.core.job.Job",
        "pushjobs/log/up.py imports keys.registry",
        "pushjobs/log/up.py imports keys.registry.KeyRegistry",
        "server/core/x.py imports server.shell",
        "server/core/x.py imports server.shell.channels",
        "server/shell/x.py imports server.front.api",
        "server/shell/x.py imports server.front.api.Api",
    ]


def test_the_toolkit_starts_only_entry_points_and_each_exists():
    started = {
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / "pushjobs").rglob("*.py"))
        for name in _started_modules(path)
    }
    # The daemons are started this way (the sandbox, ``pushjobs simulate run``): the check
    # reads them.
    assert {"server", "agent", "agent.simulator"} <= {name for _, name in started}
    for where, name in sorted(started):
        assert name in ENTRY_POINTS, f"{where} starts {name}, not an entry point"
        assert _module_exists(ROOT, name), f"{where} starts {name}, which does not exist"


def test_the_started_modules_check_reads_what_it_must(tmp_path):
    path = tmp_path / "x.py"
    path.write_text(
        'import subprocess, sys\nargv = [sys.executable, "-m", "server.main", "--config", "c"]\n'
        'subprocess.run((sys.executable, "-m", "agent"))\n'
        'spawn("n", sys.executable, "-m", "agent.simulator")\n'
    )
    assert sorted(_started_modules(path)) == ["agent", "agent.simulator", "server.main"]
    assert not _module_exists(ROOT, "server.main")
    assert _module_exists(ROOT, "server")


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_import_no_io(path):
    assert path.exists()
    assert not ({name.split(".")[0] for name in _imports(path)} & FORBIDDEN)


def test_protocol_core_works_with_zmq_blocked():
    script = """
import sys
for name in ("zmq", "sqlite3"):
    sys.modules[name] = None  # importing a module mapped to None raises ImportError
import os
from pushjobs.protocol import codec, framing, liveness, messages, replay, signing
hb = messages.NodeHeartbeat(sender="n", incarnation="i", sequence=1, timestamp=5,
                            command_endpoint="tcp://127.0.0.1:1")
key = os.urandom(32)
frames = framing.seal(hb, signing.HmacSigner("k", key))
opened = framing.open_frames(frames, lambda m, k: signing.HmacVerifier(key, owner="n"))
assert opened == hb
replay.ReplayWindow(30).check("n", "i", 1, 5, 5)
t = liveness.LivenessTracker(1.0, 3, 1)
assert t.heartbeat("n", 0.0) is not None
assert "zmq" not in sys.modules or sys.modules["zmq"] is None
print("pure ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure ok"
