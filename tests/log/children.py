"""Real child processes for log tests: line-oriented stdout, waits with deadlines, no leaks.

A reader thread turns the child's stdout into a queue, so every wait has a timeout and no
test ever sleeps. ``kill()`` is SIGKILL by PID; ``close()`` closes stdin (the children
exit on EOF) and kills by PID if that is not enough. The ``children`` fixture closes
whatever a test left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINE_TIMEOUT_S = 20.0


class Child:
    """``python ARGS...`` (e.g. ``-m tests.log.member_proc ...``) with a line queue."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.pid = self.proc.pid
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, name=f"child-{self.pid}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def next_line(self, timeout_s: float = LINE_TIMEOUT_S) -> str | None:
        """The next line, or None at EOF; fails the test after ``timeout_s``."""
        try:
            line = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"child {self.pid}: no output within {timeout_s} s") from None
        if line is not None:
            self.lines.append(line)
        return line

    def expect(self, prefix: str, timeout_s: float = LINE_TIMEOUT_S) -> str:
        """Read lines until one starts with ``prefix``; return it."""
        while True:
            line = self.next_line(timeout_s)
            if line is None:
                raise AssertionError(
                    f"child {self.pid} exited ({self.proc.poll()}) before {prefix!r}; "
                    f"said {self.lines}"
                )
            if line.startswith(prefix):
                return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()
        # The reader sees EOF once the child is gone; closing its pipe under it would raise.
        self._reader.join(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def spec_arg(spec: Mapping[str, str]) -> str:
    return json.dumps(dict(spec))
