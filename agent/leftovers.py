"""What an agent that died left running: found in its journal, killed before any new work.

The reaper (``reaper.py``) kills a dead agent's job at once; only when the reaper died too
(both killed together, the machine's OOM killer) can a job outlive its agent. So at start,
before it asks for a config, the agent reads the journal's ``running`` rows: each names a
job's process group and the kernel's start time of its leader. A group whose leader is still
the same process (same pid, same start time: a reused pid is never taken for it) is killed
with SIGKILL, and the job's outcome is recorded ``failed`` so the server hears of it after
discovery; every row is then cleared. A node never runs two jobs at once.

Killed at any line: the rows are cleared only after the kill; a second start finds the
same rows and the same check repeats (a killed group is simply gone).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger("pushjobs.agent")


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot); None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    if fields[0] == "Z":  # a zombie: already dead
        return None
    return int(fields[19])  # field 22 of proc(5), counted after the command name


def kill_if_same(pgid: int, started: int) -> bool:
    """Kill process group ``pgid`` if its leader is the process that started at ``started``."""
    if start_time(pgid) != started:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return True
