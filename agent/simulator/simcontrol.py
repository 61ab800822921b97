"""The simulator's control lines: one command a line on stdin, one JSON answer a line.

    stats           counters, drops, how many nodes are configured or silent
    silence A B     nodes A..B-1 (this process's own 0-based indexes) send nothing and
                    ignore commands: for flapping and thresholds at scale
    resume A B      they speak again
    restart A B     new incarnations, as if the agents were restarted

``LineReader`` collects whole lines from a non-blocking descriptor; ``parse`` turns one
into a ``Control`` or the error answer. Killed at any line: a partial line is lost with
the process; whoever drives the simulator sees its stdout close.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

RANGE_VERBS = ("silence", "resume", "restart")


@dataclass(frozen=True, slots=True)
class Control:
    verb: str
    start: int = 0
    end: int = 0


def parse(line: str, nodes: int) -> Control | dict[str, Any]:
    """The control ``line`` asks for, or the answer that refuses it."""
    words = line.split()
    if not words:
        return {"ok": False, "error": "empty command"}
    verb, args = words[0], words[1:]
    if verb == "stats":
        return Control(verb)
    if verb in RANGE_VERBS:
        try:
            start, end = (int(a) for a in args)
        except ValueError:
            return {"ok": False, "error": f"usage: {verb} FIRST END (local indexes)"}
        if not 0 <= start < end <= nodes:
            return {"ok": False, "error": f"range must lie within 0..{nodes}"}
        return Control(verb, start, end)
    return {"ok": False, "error": f"unknown command {verb!r} (stats, silence, resume, restart)"}


class LineReader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._buf = b""

    def lines(self) -> list[str] | None:
        """The whole lines that arrived (maybe none); None once the input has ended."""
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        return [line.decode(errors="replace") for line in lines]
