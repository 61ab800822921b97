"""The protocol core is pure: it imports no socket, database, clock or thread module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"zmq", "sqlite3", "time", "threading", "socket", "asyncio", "subprocess"}
PURE_DIRS = [ROOT / "pushjobs" / "protocol"]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


PURE_FILES = sorted(p for d in PURE_DIRS for p in d.rglob("*.py"))


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
