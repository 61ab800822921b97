"""A lease whose holder's process is gone is taken at once (SQLite, real processes).

A server restarted on the same host must not wait out the session of its own dead
predecessor. The holder is a real child process holding a real lease in a real SQLite
file with a long session; it is killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from pushjobs.log.sqlite.sqlite_log import SqliteLog
from pushjobs.log.topics import TopicPolicy

CHILD = textwrap.dedent(
    """
    import os, socket, sys
    from pushjobs.log.sqlite.sqlite_log import SqliteLog
    log = SqliteLog(sys.argv[1])
    member = log.member("g", "t", f"child@{socket.gethostname()}/{os.getpid()}",
                        session_timeout_s=600)
    print("owner", member.poll(), flush=True)
    sys.stdin.read()
    """
)


def test_a_dead_holder_on_this_host_loses_its_lease_at_once(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = SqliteLog(path)
    log.create_topic("t", TopicPolicy())
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    ) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.startswith("owner "), line
            epoch = int(line.split()[1])
            me = log.member("g", "t", "me", session_timeout_s=5)
            assert me.poll() is None  # its holder lives, and its session is long
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
            assert me.poll() == epoch + 1  # at once, not 600 s later
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
            log.close()
