"""What the ``pushjobs`` command shows, through the real command against a real fleet: the
output a pipe gets from ``job start`` (no progress line), a failed node's row pointing at
its output, ``node list`` with each node's tags and facts, and on a terminal a live line
whose elapsed time ticks while no state changes."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator

import pytest

from pushjobs.cli.exitcodes import Exit
from tests.e2e.conftest import Fleet, make_fleet

PUSHJOBS = shutil.which("pushjobs", path=os.path.dirname(sys.executable)) or "pushjobs"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path_factory.mktemp("views"), nodes=["node-1", "node-2"])
    try:
        fleet.sandbox.write_agent_config("node-2", tags=["web", "eu"])
        fleet.sandbox.kill("node-2", signal.SIGTERM)
        fleet.sandbox.start_agent("node-2")
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def pushjobs(fleet: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PUSHJOBS, *args],
        capture_output=True,
        text=True,
        env=fleet.sandbox.env(),
        timeout=60,
        check=False,
    )


def test_a_pipe_gets_the_table_and_no_progress_line(fleet: Fleet) -> None:
    result = pushjobs(fleet, "job", "start", "hello", "node-*")
    out, err = result.stdout, result.stderr
    assert result.returncode == Exit.OK, err
    assert err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "STATE", "EXIT", "REASON"]
    assert [line.split()[:2] for line in lines[1:3]] == [
        ["node-1", "succeeded"],
        ["node-2", "succeeded"],
    ]
    assert lines[3].startswith("job ") and lines[3].endswith("complete: 2 succeeded")
    assert len(lines) == 4


def test_a_failed_nodes_row_points_at_its_output(fleet: Fleet) -> None:
    result = pushjobs(fleet, "job", "start", "fail-on-2", "node-*")
    out = result.stdout
    assert result.returncode == Exit.FAILED
    row = next(line for line in out.splitlines() if line.startswith("node-2"))
    job_id = out.splitlines()[-1].split()[1]
    assert row.endswith(f"output: pushjobs job output {job_id} node-2 --channel stderr")
    shown = pushjobs(fleet, "job", "output", job_id, "node-2", "--channel", "stderr")
    assert shown.returncode == 0 and shown.stdout == "boom\n"


def test_node_list_shows_tags_and_facts(fleet: Fleet) -> None:
    result = pushjobs(fleet, "node", "list")
    assert result.returncode == Exit.OK, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[-2:] == ["TAGS", "FACTS"]
    row = next(line for line in rows if line.startswith("node-2"))
    assert " web,eu " in row
    assert "hostname=" in row and "os=linux" in row
    assert " sandbox " in next(line for line in rows if line.startswith("node-1"))


def test_on_a_terminal_the_line_ticks_while_nothing_changes(fleet: Fleet) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(
        [PUSHJOBS, "job", "start", "sleep-3", "node-*"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=fleet.sandbox.env(),
    )
    os.close(slave)
    drawn = b""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            readable, _, _ = select.select([master], [], [], 1.0)
            if not readable:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            drawn += chunk
        assert proc.wait(timeout=30) == Exit.OK
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = drawn.decode(errors="replace")
    # Every node ran for 3 s and its state did not change meanwhile: the elapsed time did.
    running = [f for f in re.split(r"[\r\n]", text) if "running" in f and "2 running" in f]
    assert {"0:00:01", "0:00:02"} <= {t for f in running for t in re.findall(r"0:00:0\d", f)}
    assert "complete: 2 succeeded" in text
