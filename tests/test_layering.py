"""Layering: imports go down the layers of the design, and the pure parts import no I/O.

- the shared toolkit (``pushjobs/``) and ``keys/`` import neither daemon package: the CLI
  and the sandbox must not depend on the daemons they sit beside;
- the server and the agent do not import each other;
- the protocol core and the state machines (job, coordinator, node table, agent runner)
  import no socket, database, clock or thread module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"zmq", "sqlite3", "time", "threading", "socket", "asyncio", "subprocess"}
PURE_DIRS = [ROOT / "pushjobs" / "protocol"]
PURE_MODULES = [
    ROOT / "pushjobs" / "states.py",
    ROOT / "pushjobs" / "quorum.py",
    ROOT / "server" / "transitions.py",
    ROOT / "server" / "effects.py",
    ROOT / "server" / "job.py",
    ROOT / "server" / "snapshot.py",
    ROOT / "server" / "coordinator.py",
    ROOT / "server" / "nodes.py",
    ROOT / "server" / "watches.py",
    ROOT / "server" / "quotas.py",
    ROOT / "server" / "finished.py",
    ROOT / "server" / "schedbudget.py",
    ROOT / "server" / "heartbeats.py",
    ROOT / "agent" / "runner.py",
]
# Package -> top-level packages of this project it must never import.
NEVER = {
    "pushjobs": {"server", "agent"},
    "keys": {"server", "agent"},
    "server": {"agent"},
    "agent": {"server"},
}


def _imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports, at any depth (lazy imports too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _violations(root: Path) -> list[str]:
    found = []
    for package, forbidden in NEVER.items():
        for path in sorted((root / package).rglob("*.py")):
            for name in sorted(_imports(path) & forbidden):
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


PURE_FILES = sorted(p for d in PURE_DIRS for p in d.rglob("*.py")) + PURE_MODULES


def test_imports_go_down_the_layers_only():
    assert _violations(ROOT) == []


def test_the_layering_check_catches_an_upward_import(tmp_path):
    for package in NEVER:
        (tmp_path / package).mkdir()
    (tmp_path / "pushjobs" / "ok.py").write_text("from pushjobs.states import JobState\n")
    (tmp_path / "pushjobs" / "cli.py").write_text(
        "def f():\n    from server.job import Job\n    return Job\n"
    )
    (tmp_path / "agent" / "x.py").write_text("import server.daemon\n")
    assert _violations(tmp_path) == ["pushjobs/cli.py imports server", "agent/x.py imports server"]


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_import_no_io(path):
    assert not (_imports(path) & FORBIDDEN)


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
