"""Runs one job's command as its own process group and reports how it ended.

Theory of operation. ``start`` spawns the argv in a new session (so a new process group
whose id is the child's pid) with stdin from /dev/null and stdout/stderr on pipes. One
watcher thread reads both pipes into tail-keeping buffers, enforces the run timeout and
waits for the child. The job ends when the child exits, when the deadline passes, or when
``abort`` is called: at the deadline and on abort the group gets SIGKILL at once; then in
every case whatever is left of it gets SIGTERM, then SIGKILL after a short grace, so no
process of a job outlives it (one that left the group with ``setsid`` does). The
outcome is handed to ``on_done`` from the watcher thread; the daemon turns that into a
wakeup of its own loop.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.capture import TailBuffer
from pushjobs.errors import ExecutionError

KILL_GRACE_S = 0.5
READ_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class Outcome:
    job_id: str
    status: str  # "succeeded", "failed", "timed_out" or "aborted"
    exit_status: int | None  # negative: killed by that signal
    duration_ms: int
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    reason: str


class Execution:
    def __init__(
        self,
        job_id: str,
        argv: list[str],
        *,
        timeout_s: float,
        on_done: Callable[[Outcome], None],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        capture_bytes: int = 64 * 1024,
    ) -> None:
        self.job_id = job_id
        self._on_done = on_done
        self._timeout_s = timeout_s
        self._abort_reason: str | None = None
        self._lock = threading.Lock()
        self._stdout = TailBuffer(capture_bytes)
        self._stderr = TailBuffer(capture_bytes)
        self._started = time.monotonic()
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                user=user,
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise ExecutionError(f"cannot start {argv[0] if argv else '?'}: {exc}") from exc
        self.pid = self._proc.pid
        self._thread = threading.Thread(target=self._watch, name=f"job-{job_id}", daemon=True)
        self._thread.start()

    def abort(self, reason: str = "abort requested") -> None:
        """Kill the job's process group; the outcome follows through ``on_done``."""
        with self._lock:
            if self._abort_reason is None:
                self._abort_reason = reason
        self._signal_group(signal.SIGKILL)

    def join(self, timeout_s: float | None = None) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _watch(self) -> None:
        deadline = self._started + self._timeout_s
        timed_out = False
        sel = selectors.DefaultSelector()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for pipe, buf in ((self._proc.stdout, self._stdout), (self._proc.stderr, self._stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, buf)
        try:
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0 and not timed_out:
                    timed_out = True
                    self._signal_group(signal.SIGKILL)
                if self._proc.poll() is not None:
                    # The command is done; leftovers of its group holding the pipes are not
                    # a reason to wait: drain what is there, then end the group.
                    self._drain(sel)
                    break
                for key, _ in sel.select(timeout=min(0.05, max(remaining, 0.0)) or 0.05):
                    self._read(sel, key)
            self._proc.wait()
        finally:
            sel.close()
            self._proc.stdout.close()
            self._proc.stderr.close()
        self._end_group()
        self._on_done(self._outcome(timed_out))

    def _read(self, sel: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        try:
            chunk = os.read(key.fd, READ_CHUNK)
        except BlockingIOError:
            return
        if chunk:
            key.data.write(chunk)
        else:
            sel.unregister(key.fileobj)

    def _drain(self, sel: selectors.BaseSelector) -> None:
        for key, _ in sel.select(timeout=0):
            while key.fileobj in sel.get_map():
                before = key.data.total
                self._read(sel, key)
                if key.data.total == before:
                    break

    def _end_group(self) -> None:
        self._signal_group(signal.SIGTERM)
        end = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < end and _group_alive(self.pid):
            time.sleep(0.01)
        self._signal_group(signal.SIGKILL)

    def _outcome(self, timed_out: bool) -> Outcome:
        code = self._proc.returncode
        duration_ms = int((time.monotonic() - self._started) * 1000)
        if self._abort_reason is not None:
            status, reason = "aborted", self._abort_reason
        elif timed_out:
            status, reason = "timed_out", f"run timeout of {self._timeout_s:g} s"
        elif code == 0:
            status, reason = "succeeded", ""
        elif code is not None and code < 0:
            status, reason = "failed", f"killed by signal {signal.Signals(-code).name}"
        else:
            status, reason = "failed", f"exit status {code}"
        return Outcome(
            job_id=self.job_id,
            status=status,
            exit_status=code,
            duration_ms=duration_ms,
            stdout=self._stdout.text(),
            stderr=self._stderr.text(),
            stdout_truncated=self._stdout.truncated,
            stderr_truncated=self._stderr.truncated,
            reason=reason,
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
