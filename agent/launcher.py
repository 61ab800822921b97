"""A job's process on this node: the commit it came with, starting it, and its end.

The launcher holds each commit (command and options) from the moment it arrives until its
job ends or is aborted, and at most one ``Execution``. Every commit is held, the nacked
ones too (the runner decides after the hold), so what is held is bounded: a start lets go
of every other commit (the runner runs only the job it committed to, so the rest were
nacked), and past ``MAX_HELD`` the oldest that is not running goes. ``start`` resolves
the command through the whitelist as it is now (it may have changed since the commit),
judges the commit again (whitelist and env policy: ``judge``, by default the built-in
env policy alone), writes the commit's file payload, builds the environment (the agent's
own, the commit's ``env`` and ``secret_env``, ``PUSHJOBS_JOB_ID`` and ``PUSHJOBS_NODE``)
and starts the process group, in a cgroup of its own where the agent can make one
(``cgroups.py``). The executor's watcher thread hands the outcome over
through ``on_done``, which queues it and wakes the daemon's loop; ``ended`` gives the
outcomes back on the loop's thread.

Killed at any line: the commits held and the outcome queue are lost. The reaper
(``reaper.py``), told of every process group and cgroup as it starts, kills the running job when the
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

from agent.cgroups import Containment
from agent.envpolicy import EnvPolicy
from agent.executor import Execution, Outcome
from agent.reaper import TAG_VARIABLE, Reaper
from pushjobs.errors import ExecutionError
from pushjobs.protocol import messages as m

Resolve = Callable[[str], list[str] | None]
Judge = Callable[[m.Commit], str | None]

MAX_HELD = 32
"""Commits held at most: one is wanted (the committed or running job's); the rest are
nacked ones a hostile or confused writer may send without end."""


class Launcher:
    def __init__(
        self,
        node: str,
        capture_bytes: int,
        wake: Callable[[], None],
        reaper: Reaper | None = None,
        judge: Judge | None = None,
        *,
        containment: Containment | None = None,
        adopter: int | None = None,
    ) -> None:
        """``containment``: where each job's cgroup is made (None: no cgroups);
        ``adopter``: this process's pid if it is a child subreaper (``subreaper.py``)."""
        self.node = node
        self.containment = containment
        self.adopter = adopter
        self.judge = judge if judge is not None else _env_only(EnvPolicy())
        self.reaper = reaper
        self.capture_bytes = capture_bytes
        self.wake = wake
        self.commits: dict[str, m.Commit] = {}
        self.execution: Execution | None = None
        self._ended: queue.SimpleQueue[Outcome] = queue.SimpleQueue()

    def hold(self, commit: m.Commit) -> None:
        # Re-inserted, not updated: the dict stays oldest-first for the eviction below.
        self.commits.pop(commit.job_id, None)
        self.commits[commit.job_id] = commit
        running = self.running
        for job_id in list(self.commits):
            if len(self.commits) <= MAX_HELD:
                break
            if job_id != running:
                del self.commits[job_id]

    def forget(self, job_id: str) -> None:
        self.commits.pop(job_id, None)

    def start(self, job_id: str, resolve: Resolve) -> Execution:
        """Start the held commit's command; ExecutionError says why it could not."""
        # One job at a time: every other commit held now was nacked, or is over.
        for other in [j for j in self.commits if j != job_id]:
            del self.commits[other]
        try:
            return self._start(job_id, resolve)
        except ExecutionError:
            self.commits.pop(job_id, None)  # the job fails here: nothing needs it any more
            raise

    def _start(self, job_id: str, resolve: Resolve) -> Execution:
        commit = self.commits.get(job_id)
        argv = resolve(commit.command) if commit is not None else None
        if commit is None or argv is None:
            raise ExecutionError("command no longer whitelisted")
        refused = self.judge(commit)
        if refused is not None:
            raise ExecutionError(refused)
        opts = commit.options
        env = dict(os.environ)
        env.update(opts.env)
        env.update(opts.secret_env)
        env["PUSHJOBS_JOB_ID"] = job_id
        env["PUSHJOBS_NODE"] = self.node
        if self.reaper is not None:
            env[TAG_VARIABLE] = self.reaper.tag
        cgroup = None
        try:
            if opts.file is not None:
                write_payload(opts.file)
            if self.containment is not None:
                cgroup = self.containment.new_job()
            self.execution = Execution(
                job_id,
                argv,
                timeout_s=opts.timeout_s,
                on_done=self._done_from_thread,
                env=env,
                cwd=opts.cwd,
                user=opts.user,
                capture_bytes=self.capture_bytes,
                cgroup=cgroup,
                adopter=self.adopter,
                spare=frozenset({self.reaper.pid}) if self.reaper is not None else frozenset(),
            )
        except (OSError, ExecutionError) as exc:
            if cgroup is not None:
                cgroup.remove()
            if isinstance(exc, ExecutionError):
                raise
            raise ExecutionError(str(exc)) from exc
        except ValueError as exc:  # a file payload that is not base64: the job fails
            raise ExecutionError(f"bad file payload: {exc}") from exc
        if self.reaper is not None:
            self.reaper.watch(self.execution.pid)
            if self.execution.cgroup is not None:
                self.reaper.watch_cgroup(str(self.execution.cgroup.path))
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
                    if self.execution.cgroup is not None:
                        self.reaper.release_cgroup(str(self.execution.cgroup.path))
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


def _env_only(policy: EnvPolicy) -> Judge:
    def judge(commit: m.Commit) -> str | None:
        return policy.first_refusal([*commit.options.env, *commit.options.secret_env])

    return judge


def write_payload(payload: m.FilePayload) -> None:
    data = b64decode(payload.content_b64, validate=True)
    path = Path(payload.path)
    tmp = path.with_name(path.name + ".pushjobs-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, payload.mode)
    try:
        written = 0
        while written < len(data):  # a short write (a disk filling up) is not the file
            written += os.write(fd, data[written:])
        os.fsync(fd)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)  # never installed, never left behind
        raise
    os.close(fd)
    os.chmod(tmp, payload.mode)
    os.replace(tmp, path)
