"""The reaper: a job never outlives its agent, even one killed with SIGKILL.

Theory of operation. A job runs as its own process group, so that it can be ended whole;
that also means nothing kills it when the agent dies. At start-up the agent starts a tiny
watchdog process (``python -S``, a few MiB, nothing imported) in a session of its own, so
that a signal to the agent's process group does not reach it, and keeps the write end of
its stdin. The agent tells it each job's process group as the job starts (``+PGID``) and
when the job has ended (``-PGID``). The watchdog only reads: when its stdin reports
end-of-file the agent is gone, however it went, and every group still registered is
killed with SIGKILL; so is every process whose environment carries this agent's tag
(``PUSHJOBS_AGENT_TAG``, set for every job), which covers a job spawned in the instant
before its ``+PGID`` line (the chaos bench killed agents in that instant). Then the
watchdog exits. It ignores SIGINT, SIGTERM and SIGHUP: a
Ctrl-C meant for the agent lets the agent end its job itself first.

Killed at any line. The agent: the kernel closes its end of the pipe and the watchdog
kills the job within milliseconds. The watchdog: the agent's next write fails; it logs
that jobs are no longer protected and carries on (a restarted agent starts a new one).

What it cannot do: a process that leaves the job's process group (``setsid``, a daemon
that double-forks) escapes both the executor's group kill and the reaper. Only a cgroup
contains those: run the agent as a systemd service (its default ``KillMode=control-group``
kills everything the unit started when the agent stops or dies).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys

log = logging.getLogger("pushjobs.agent")

TAG_VARIABLE = "PUSHJOBS_AGENT_TAG"

# The watchdog's whole program; ``python -S -c`` runs it with no import beyond os/signal.
WATCHDOG = r"""
import os, signal, sys
tag = ("PUSHJOBS_AGENT_TAG=" + sys.argv[1]).encode()
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
groups, pending = set(), b""
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\n")
    for line in lines:
        sign, digits = line[:1], line[1:]
        if digits.isdigit() and sign == b"+":
            groups.add(int(digits))
        elif digits.isdigit() and sign == b"-":
            groups.discard(int(digits))
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open("/proc/" + pid + "/environ", "rb") as f:
            tagged = tag in f.read().split(b"\0")
        if tagged:
            os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
"""


class Reaper:
    def __init__(self) -> None:
        self.tag = secrets.token_hex(8)  # in every job's environment (``TAG_VARIABLE``)
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", WATCHDOG, self.tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        assert self._proc.stdin is not None
        self._fd: int | None = self._proc.stdin.fileno()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def watch(self, pgid: int) -> None:
        self._tell(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        self._tell(b"-%d\n" % pgid)

    def close(self) -> None:
        """The agent stops cleanly: the watchdog sees end-of-file and exits."""
        self._fd = None
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def _tell(self, line: bytes) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line)
        except OSError as exc:
            log.error("the job watchdog is gone (%s): a job may outlive this agent", exc)
            self._fd = None
