"""A job's process on this node: the commit it came with, starting it, and its end.

The launcher holds each commit (command and options) from the moment it arrives until its
job ends or is aborted, and at most one ``Execution``. ``start`` resolves the command
through the whitelist as it is now (it may have changed since the commit), writes the
commit's file payload, builds the environment (the agent's own, the commit's ``env``,
``PUSHJOBS_JOB_ID`` and ``PUSHJOBS_NODE``) and starts the process group. The executor's
watcher thread hands the outcome over through ``on_done``, which queues it and wakes the
daemon's loop; ``ended`` gives the outcomes back on the loop's thread.

Killed at any line: the commits held and the outcome queue are lost. The reaper
(``reaper.py``), told of every process group as it starts, kills the running job when the
agent dies; the journal has the job id, so the restarted agent nacks the same job instead
of running it twice. A payload
file is written to a temporary name and renamed, so it is never seen half written.
"""

from __future__ import annotations

import os
import queue
from base64 import b64decode
from collections.abc import Callable, Iterator
from pathlib import Path

from agent.executor import Execution, Outcome
from agent.reaper import TAG_VARIABLE, Reaper
from pushjobs.errors import ExecutionError
from pushjobs.protocol import messages as m

Resolve = Callable[[str], list[str] | None]


class Launcher:
    def __init__(
        self,
        node: str,
        capture_bytes: int,
        wake: Callable[[], None],
        reaper: Reaper | None = None,
    ) -> None:
        self.node = node
        self.reaper = reaper
        self.capture_bytes = capture_bytes
        self.wake = wake
        self.commits: dict[str, m.Commit] = {}
        self.execution: Execution | None = None
        self._ended: queue.SimpleQueue[Outcome] = queue.SimpleQueue()

    def hold(self, commit: m.Commit) -> None:
        self.commits[commit.job_id] = commit

    def forget(self, job_id: str) -> None:
        self.commits.pop(job_id, None)

    def start(self, job_id: str, resolve: Resolve) -> Execution:
        """Start the held commit's command; ExecutionError says why it could not."""
        commit = self.commits.get(job_id)
        argv = resolve(commit.command) if commit is not None else None
        if commit is None or argv is None:
            raise ExecutionError("command no longer whitelisted")
        opts = commit.options
        env = dict(os.environ)
        env.update(opts.env)
        env["PUSHJOBS_JOB_ID"] = job_id
        env["PUSHJOBS_NODE"] = self.node
        if self.reaper is not None:
            env[TAG_VARIABLE] = self.reaper.tag
        try:
            if opts.file is not None:
                write_payload(opts.file)
            self.execution = Execution(
                job_id,
                argv,
                timeout_s=opts.timeout_s,
                on_done=self._done_from_thread,
                env=env,
                cwd=opts.cwd,
                user=opts.user,
                capture_bytes=self.capture_bytes,
            )
        except OSError as exc:
            raise ExecutionError(str(exc)) from exc
        except ValueError as exc:  # a file payload that is not base64: the job fails
            raise ExecutionError(f"bad file payload: {exc}") from exc
        if self.reaper is not None:
            self.reaper.watch(self.execution.pid)
        return self.execution

    def kill(self, job_id: str, reason: str) -> None:
        if self.execution is not None and self.execution.job_id == job_id:
            self.execution.abort(reason)

    def ended(self) -> Iterator[tuple[Outcome, m.Commit | None]]:
        """Each outcome handed over since the last call, with its commit (now let go)."""
        while True:
            try:
                outcome = self._ended.get_nowait()
            except queue.Empty:
                return
            if self.execution is not None and self.execution.job_id == outcome.job_id:
                if self.reaper is not None:
                    self.reaper.release(self.execution.pid)  # its group is gone already
                self.execution = None
            yield outcome, self.commits.pop(outcome.job_id, None)

    @property
    def running(self) -> str | None:
        """The job id of the process running now, if any."""
        return None if self.execution is None else self.execution.job_id

    def stop(self, reason: str, timeout_s: float) -> None:
        """Abort the running process (if any) and wait at most ``timeout_s`` for its end."""
        if self.execution is not None:
            self.execution.abort(reason)
            self.execution.join(timeout_s)

    def _done_from_thread(self, outcome: Outcome) -> None:
        self._ended.put(outcome)
        self.wake()


def write_payload(payload: m.FilePayload) -> None:
    data = b64decode(payload.content_b64, validate=True)
    path = Path(payload.path)
    tmp = path.with_name(path.name + ".pushjobs-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, payload.mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, payload.mode)
    os.replace(tmp, path)
