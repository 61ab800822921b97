"""Runs one job's command as its own process group and reports how it ended.

Theory of operation. ``start`` spawns the argv in a new session (so a new process group
whose id is the child's pid) with stdin from /dev/null and stdout/stderr on pipes; with a
``cgroup`` (``cgroups.py``), through the gate that puts the process in the job's cgroup
before its command runs. One watcher thread reads both pipes into tail-keeping buffers,
enforces the run timeout and waits for the child. The job ends when the child exits,
when the deadline passes, or when ``abort`` is called (the watcher acts on it within
``TICK_S``). At the deadline and on abort every process of the job is killed at once: the
whole cgroup, or, without one, every process ``procscan.end`` finds by ancestry, adoption
and the job's marks, stopped first so none forks away while it looks. When the command
ends on its own, what is left of its group gets SIGTERM, then SIGKILL after a short grace,
and then the rest of the job (a process that left the group with ``setsid``) is killed
the same way: no process of a job outlives it. What could not be killed is in the
outcome (``left_running``), never silently left. The outcome is handed to ``on_done``
from the watcher thread; the daemon turns that into a wakeup of its own loop.

Killed at any line: the job's processes are the reaper's (``reaper.py``), which was told
of its group and cgroup when it started, and finds the rest by the agent's tag.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent import procscan
from agent.capture import TailBuffer
from agent.cgroups import GATE, JobCgroup
from agent.reaper import TAG_VARIABLE
from pushjobs.errors import ExecutionError

log = logging.getLogger("pushjobs.agent")

KILL_GRACE_S = 0.5
READ_CHUNK = 65536
TICK_S = 0.05


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
    left_running: tuple[str, ...] = ()  # processes of the job that could not be killed


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
        cgroup: JobCgroup | None = None,
        adopter: int | None = None,
        spare: frozenset[int] = frozenset(),
        kill: Callable[[int, int], None] = os.kill,
    ) -> None:
        """``cgroup``: the job's own (else its processes are found by ``procscan``);
        ``adopter``: this process, if it is a child subreaper (``subreaper.py``), and
        ``spare`` its children that are not the job's; ``kill``: how a process is signalled
        (a test's stand-in for one the agent may not signal)."""
        self.job_id = job_id
        self._on_done = on_done
        self._timeout_s = timeout_s
        self._abort_reason: str | None = None
        self._lock = threading.Lock()
        self._kill_now = threading.Event()
        self._stdout = TailBuffer(capture_bytes)
        self._stderr = TailBuffer(capture_bytes)
        self._cgroup = cgroup
        self._adopter = adopter
        self._spare = spare
        self._kill = kill
        self._left: list[str] = []
        # The job's marks: the agent's tag and the job's id, in every process's environment.
        self._marks: list[bytes] = []
        if env is not None and env.get(TAG_VARIABLE):
            job = env.get("PUSHJOBS_JOB_ID", "")
            self._marks = [
                f"{TAG_VARIABLE}={env[TAG_VARIABLE]}".encode(),
                f"PUSHJOBS_JOB_ID={job}".encode(),
            ]
        self._started = time.monotonic()
        if cgroup is not None:
            # Behind the gate a command that does not exist is sh's exit 127; say so first.
            path = (env or os.environ).get("PATH", os.defpath)
            if argv and "/" not in argv[0] and shutil.which(argv[0], path=path) is None:
                raise ExecutionError(f"cannot start {argv[0]}: not found in PATH")
            argv = ["sh", "-c", GATE, "pushjobs-job", *argv]
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if cgroup is not None else subprocess.DEVNULL,
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
        if cgroup is not None:
            self._open_gate(cgroup)
        self._thread = threading.Thread(target=self._watch, name=f"job-{job_id}", daemon=True)
        self._thread.start()

    @property
    def cgroup(self) -> JobCgroup | None:
        return self._cgroup

    def _open_gate(self, cgroup: JobCgroup) -> None:
        """Put the gated process in its cgroup, then let it exec the command."""
        try:
            cgroup.enter(self.pid)
        except OSError as exc:
            log.warning("job %s: cannot enter its cgroup (%s); by ancestry", self.job_id, exc)
            cgroup.remove()
            self._cgroup = None
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):  # it died before reading: its exit says so
            self._proc.stdin.write(b"\n")
            self._proc.stdin.close()

    def abort(self, reason: str = "abort requested") -> None:
        """Kill every process of the job; the outcome follows through ``on_done``.

        The job's group is killed here and now, so the command is gone (and the node free
        for its next job) as fast as before; the watcher, woken by its pipes closing, then
        looks for what left the group (``_kill_job``)."""
        with self._lock:
            if self._abort_reason is None:
                self._abort_reason = reason
        self._kill_now.set()
        self._signal_group(signal.SIGKILL)

    def join(self, timeout_s: float | None = None) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _watch(self) -> None:
        deadline = self._started + self._timeout_s
        timed_out = killed = False
        sel = selectors.DefaultSelector()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for pipe, buf in ((self._proc.stdout, self._stdout), (self._proc.stderr, self._stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, buf)
        try:
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0 and not timed_out and not self._kill_now.is_set():
                    timed_out = True
                    self._kill_now.set()
                if self._kill_now.is_set() and not killed:
                    killed = True
                    self._kill_job()
                if self._proc.poll() is not None:
                    # The command is done; leftovers of its group holding the pipes are not
                    # a reason to wait: drain what is there, then end the group.
                    self._drain(sel)
                    break
                for key, _ in sel.select(timeout=min(TICK_S, max(remaining, 0.0)) or TICK_S):
                    self._read(sel, key)
            self._proc.wait()
        finally:
            sel.close()
            self._proc.stdout.close()
            self._proc.stderr.close()
        self._end_group()
        if killed or not self._nothing_left():
            self._kill_job()
        elif self._cgroup is not None:
            self._cgroup.remove()
        self._on_done(self._outcome(timed_out))

    def _nothing_left(self) -> bool:
        """After a command that ended on its own and its group: whether no other process
        of the job can be left, judged cheaply (every job pays this, most leave nothing):
        an empty cgroup, or, the agent being a subreaper, no child of the agent that is not
        its own (an escaper whose parent is gone is adopted by the agent). Otherwise the
        full look (``_kill_job``) decides."""
        if self._cgroup is not None:
            return not self._cgroup.populated()
        if self._adopter is not None:
            left = procscan.children(self._adopter) - set(self._spare) - {self.pid}
            return not left
        return False

    def _kill_job(self) -> None:
        """Kill every process of the job: its cgroup, or what ``procscan`` finds."""
        if self._cgroup is not None:
            self._left = self._cgroup.kill()
        else:
            self._left = procscan.end(
                {self.pid},
                self._marks,
                adopter=self._adopter,
                spare=set(self._spare) | {self.pid},
                kill=self._kill,
            )
        self._signal_group(signal.SIGKILL)  # the leader's group, whatever the look found
        if self._adopter is not None:
            procscan.reap_adopted(self._adopter, set(self._spare) | {self.pid})

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
            left_running=tuple(self._left),
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
