"""A child process of a sandbox: started with a stdout pipe and its stderr in a log file.

Each child announces itself with one ``ready`` line on stdout (``await_ready`` waits for
it); later lines are control answers (``Proc.read_line``). Nothing here outlives the
process that started it: children are ended by PID (``stop_all``: SIGTERM, then SIGKILL)
and waited for, and a killed parent leaves only their log files behind.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pushjobs.errors import SandboxError


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    ready_line: str = ""
    rest: bytes = b""  # stdout read past the ready line

    def read_line(self, timeout_s: float) -> str:
        """The next stdout line, waiting at most ``timeout_s``; SandboxError if none."""
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.rest:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(f"{self.name}: no output line within {timeout_s:g} s")
            readable, _, _ = select.select([fd], [], [], min(remaining, 0.1))
            if readable:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise SandboxError(f"{self.name} closed its output:\n{self.log_text()[-2000:]}")
                self.rest += chunk
        line, self.rest = self.rest.split(b"\n", 1)
        return line.decode(errors="replace")

    def send_line(self, text: str) -> None:
        assert self.popen.stdin is not None, "started without a stdin pipe"
        self.popen.stdin.write(text.encode() + b"\n")
        self.popen.stdin.flush()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        """Signal the process and wait for it to end."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        self.popen.wait(timeout=20)

    def kill(self) -> None:
        """SIGKILL it if it still runs, wait, and close its stdout."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=20)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdin: bool = False,
) -> Proc:
    """Start ``argv`` with its stdout piped and its stderr appended to ``log_path``."""
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            env=dict(env),
            cwd=cwd,
        )
    return Proc(name, popen, log_path)


def await_ready(proc: Proc, marker: str, timeout_s: float) -> None:
    """Wait for the first stdout line, which must start with ``marker``; else kill it."""
    assert proc.popen.stdout is not None
    fd = proc.popen.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buffer = b""
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.popen.poll() is not None:
            proc.kill()
            raise SandboxError(
                f"{proc.name} did not become ready within {timeout_s:g} s "
                f"(exit {proc.popen.returncode}); its log:\n{proc.log_text()[-3000:]}"
            )
        readable, _, _ = select.select([fd], [], [], min(remaining, 0.1))
        if readable:
            chunk = os.read(fd, 4096)
            if not chunk and proc.popen.poll() is None:
                continue
            buffer += chunk
    first, proc.rest = buffer.split(b"\n", 1)
    line = first.decode(errors="replace")
    if not line.startswith(marker):
        proc.kill()
        raise SandboxError(f"{proc.name}: unexpected first line {line!r}")
    proc.ready_line = line


def stop_all(procs: Iterable[Proc], timeout_s: float) -> None:
    """SIGTERM every running one, then SIGKILL what is left at the deadline; wait for each."""
    procs = list(procs)
    for proc in procs:
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait(timeout=20)
        for stream in (proc.popen.stdout, proc.popen.stdin):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
