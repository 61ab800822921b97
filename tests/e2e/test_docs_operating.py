"""docs/operating.md, run as written: its code blocks, section by section.

The page builds on docs/fleet.md, so each test starts from its fleet (``set_up_fleet``);
the blocks run as ``tests/e2e/doc_recipes.py`` says. "Health and metrics" and "The
ordered log" only look at the fleet, so they share one. "Running the daemons as
services" cannot run whole on a test machine: the lines it leaves out, and what stands
in for them, it says. (The page's exit-code table is checked against the code by
``tests/cli/test_exitcodes.py``.)
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.testbed.childproc import SandboxError, await_ready, spawn, stop_all
from pushjobs.testbed.sandbox import ready_fields
from tests.e2e.doc_recipes import (
    DOCS,
    FLEET_WAITS,
    Walkthrough,
    blocks,
    commands,
    section,
    set_up_fleet,
)

PAGE = DOCS / "operating.md"
SERVICES = "## Running the daemons as services"
HEALTH = "## Health and metrics"
LOG = "## The ordered log"


def test_a_fleet_shows_its_health_and_its_log(walk: Walkthrough) -> None:
    """Two sections that only look at the fleet, run one after the other on one fleet."""
    # The page's own way to keep off a port another server holds: port 0, any free one.
    walk.env["PUSHJOBS_SERVER__METRICS_BIND"] = "127.0.0.1:0"
    set_up_fleet(walk)
    health_and_metrics_show_the_server(walk)
    the_ordered_log_shows_the_fleets_log(walk)


def health_and_metrics_show_the_server(walk: Walkthrough) -> None:
    found = blocks(PAGE, HEALTH)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    walk.block(*found[0])
    shown = walk.output("pushjobs server status").splitlines()
    assert [line.split()[0] for line in shown] == [
        "server",
        "nodes",
        "jobs",
        "drops",
        "heartbeats",
        "log",
        "gc",
    ]
    assert ", leader, epoch 1, up " in shown[0]
    assert shown[1].startswith("nodes       1 online, 0 offline, 0 pending")
    figures = json.loads(walk.output("pushjobs server status --json"))
    assert figures["leader"] is True
    url = ready_fields(walk.daemon("pushjobs-server").ready_line)["metrics"]
    with urllib.request.urlopen(url, timeout=10) as answer:
        served = answer.read().decode()
    named = set(re.findall(r"`(pushjobs_[a-z_]+|process_)", section(PAGE.read_text(), HEALTH)))
    assert len(named) >= 15, named
    missing = sorted(name for name in named if name not in served)
    assert not missing, f"named in docs/operating.md, not served: {missing}"


def the_ordered_log_shows_the_fleets_log(walk: Walkthrough) -> None:
    found = blocks(PAGE, LOG)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    lines = commands(found[0][1])
    following = [line for line in lines if "--follow" in line]
    assert len(following) == 1, lines
    for line in lines:
        if line not in following:
            walk.run(line)
    assert re.search(r"^pushjobs\.events\s", walk.output("pushjobs log topics"), re.MULTILINE)
    stats = json.loads(walk.output("pushjobs log stats --json"))
    events = next(t for t in stats["topics"] if t["topic"] == "pushjobs.events")
    assert events["records"] >= 1, events
    # --follow runs until stopped: its first record read, then stopped by PID.
    argv = shlex.split(walk.apply(following[0]))
    tail = spawn("log-tail", argv, walk.root / "logs" / "tail.log", env=walk.env, cwd=walk.root)
    try:
        assert "node_liveness" in tail.read_line(20.0)
    finally:
        stop_all([tail], 5.0)


# --- Running the daemons as services ----------------------------------------------------

STAND_IN = "nobody"  # for the user `pushjobs`, which the test does not add to the machine
SKIPPED = {
    "useradd": "adds a user to the test machine: `nobody` stands in for `pushjobs`",
    "python3 -m venv /opt/pushjobs": "a second install of what this virtualenv holds, "
    "which stands in for /opt/pushjobs",
    "systemctl": "no systemd runs the test",
}


def as_stand_in(argv: list[str]) -> list[str]:
    """``argv`` run as the stand-in user, with its group only (root drops to it)."""
    user = pwd.getpwnam(STAND_IN)
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv]


@pytest.fixture
def open_walk() -> Iterator[Walkthrough]:
    """A walkthrough in a directory other users may enter (a test's own tmp_path is
    root's alone), as /etc/pushjobs and /var/lib/pushjobs are."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("runs the server as another user: needs root and setpriv")
    probe = subprocess.run(
        as_stand_in([sys.executable, "-c", "import pushjobs, server"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    if probe.returncode != 0:
        pytest.skip(f"this checkout cannot be run by {STAND_IN}: {probe.stderr[-300:]}")
    root = Path(tempfile.mkdtemp(prefix="pushjobs-services-"))
    root.chmod(0o755)
    walk = Walkthrough(root, FLEET_WAITS)
    try:
        yield walk
    finally:
        walk.close()
        shutil.rmtree(root, ignore_errors=True)


def server_as_stand_in(walk: Walkthrough, name: str, wait_s: float) -> tuple[bool, str]:
    """Start ``pushjobs-server`` as the stand-in user: whether it became ready within
    ``wait_s``, and its log; it is stopped either way."""
    argv = as_stand_in([f"{Path(sys.executable).parent}/pushjobs-server"])
    server = spawn(
        "pushjobs-server", argv, walk.root / "logs" / f"{name}.log", env=walk.env, cwd=Path("/")
    )
    try:
        await_ready(server, "pushjobs-server", wait_s)
    except SandboxError:
        return False, server.log_text()
    else:
        assert "leader=yes" in server.ready_line, server.ready_line
        status = walk.json("pushjobs server status")
        assert isinstance(status, dict) and status["leader"] is True, status
        return True, server.log_text()
    finally:
        stop_all([server], 5.0)


def test_the_services_recipe_hands_the_server_its_key_and_state(open_walk: Walkthrough) -> None:
    walk = open_walk
    walk.env["PUSHJOBS_SERVER__METRICS_BIND"] = "127.0.0.1:0"
    set_up_fleet(walk)  # the server ran as root, in the foreground
    stop_all(walk.procs, 10.0)  # "Stop the foreground server and agent first"
    walk.procs.clear()
    sysroot = walk.root / "sysroot"
    walk.replace[:0] = [
        # /opt/pushjobs's programs: this virtualenv's, first on PATH (SKIPPED says why).
        ("/opt/pushjobs/bin/", ""),
        # The units go under the test's directory, not the machine's /etc/systemd.
        ("pushjobs systemd install", f"pushjobs systemd install --prefix {sysroot}"),
        (" pushjobs: ", f" {STAND_IN}: "),
    ]
    found = blocks(PAGE, SERVICES)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    lines = commands(found[0][1])
    skipped = [line for line in lines if line.startswith(tuple(SKIPPED))]
    assert len(skipped) == len(SKIPPED), skipped
    chowns = [line for line in lines if line.startswith("chown")]
    assert len(chowns) == 2, lines
    refusals = {
        # Root's 0600 key: the server exits at once, naming it.
        chowns[0]: "server.key: cannot read: Permission denied",
        # What the server wrote as root: it stands by, the log refused, and serves nobody.
        chowns[1]: "log.db: cannot read the log file: [Errno 13] Permission denied",
    }
    for line in lines:
        if line in refusals:
            # As the page says: before each chown, the server's user cannot run it.
            ready, log = server_as_stand_in(walk, f"before-chown-{len(refusals)}", 5.0)
            assert not ready and refusals.pop(line) in log, log
        if line not in skipped:
            walk.run(line)
    assert not refusals, refusals

    key = walk.root / "etc" / "keys" / "server.key"
    assert pwd.getpwuid(key.stat().st_uid).pw_name == STAND_IN
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    # Both done: it starts, leads and serves, as its own user.
    ready, log = server_as_stand_in(walk, "after", 30.0)
    assert ready, log

    # The units the recipe wrote: the server's user and fences, as the page says, and the
    # programs of the installation that wrote them.
    units = sysroot / "etc" / "systemd" / "system"
    unit = (units / "pushjobs-server.service").read_text()
    assert "\nUser=pushjobs\n" in unit and "\nProtectHome=yes\n" in unit
    assert f"ExecStart={Path(sys.executable).parent.resolve()}/pushjobs-server " in unit
    agent = (units / "pushjobs-agent.service").read_text()
    assert "\nUser=root\n" in agent and "\nKillMode=control-group\n" in agent
