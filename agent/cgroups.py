"""Each job in a cgroup (v2) of its own, killed whole: no process of it can leave.

Theory of operation. ``Containment.probe`` looks, once at start-up, for the cgroup v2
hierarchy (the ``cgroup2`` mount in /proc/self/mountinfo: /sys/fs/cgroup on a unified
system, /sys/fs/cgroup/unified on a hybrid one) and the agent's own cgroup in it
(/proc/self/cgroup), and tries to make a directory there: ``pushjobs-<pid>-<tag>``, the
agent's, under which each job gets ``job-<n>``. That works as root, or where the agent's
cgroup is delegated to its user (a systemd unit with ``Delegate=yes``). Where it does not
(no cgroup2 mounted, a read-only /sys/fs/cgroup in a container, an unprivileged agent),
``mode`` is ``ancestry`` and ``reason`` says why: the executor then finds the job's
processes by ancestry and marks (``procscan.py``).

A job enters its cgroup before its command runs: it is started through ``sh`` reading one
line from a pipe (``GATE``), the agent writes the new pid into the cgroup's
``cgroup.procs``, then the line; only then does ``sh`` exec the command, so every process
the command ever forks is born in the cgroup, and moving out needs write access to a
cgroup the job does not own. ``kill`` writes ``cgroup.kill`` (Linux 5.14; before it the
cgroup is frozen, each process SIGKILLed, and thawed), waits a short grace until the
cgroup is empty and removes it; what is still in it is returned described.

Killed at any line: a job's cgroup outlives the agent with its processes in it; the
reaper's watchdog, told the cgroup's path when the job started, kills it when the agent
dies (``reaper.py``). An agent dying between making the cgroup and writing the gate's line
closes the pipe: ``sh`` reads end-of-file and exits 125 without running the command. Empty
cgroups left by a killed agent are removed by the next agent's probe (``sweep``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from agent import procscan

log = logging.getLogger("pushjobs.agent")

# What the job's first process runs before its command: wait for the agent's line (it is in
# its cgroup by then), give the command /dev/null as stdin as always, and exec it. End of
# file instead of the line (the agent died) runs nothing.
GATE = 'read -r _ || exit 125; exec "$@" </dev/null'
GATE_EXIT = 125


def cgroup2_root(mountinfo: str) -> tuple[Path, str] | None:
    """The cgroup2 mount point and the root it shows (field 4), from /proc/self/mountinfo."""
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            fields = left.split()
            return Path(fields[4]), fields[3]
    return None


def own_cgroup(cgroup_file: str) -> str | None:
    """This process's cgroup v2 path (the ``0::`` line of /proc/self/cgroup)."""
    for line in cgroup_file.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def procs(directory: Path) -> list[int]:
    """Every process in ``directory`` and the cgroups under it."""
    found: list[int] = []
    for path in [directory, *(p for p in directory.rglob("*") if p.is_dir())]:
        with contextlib.suppress(OSError):
            found += [int(x) for x in (path / "cgroup.procs").read_text().split()]
    return found


@dataclass
class JobCgroup:
    path: Path

    def enter(self, pid: int) -> None:
        """Move ``pid`` in; OSError if the kernel refuses."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def populated(self) -> bool:
        """Whether any process is in the cgroup or under it (``cgroup.events``): one small
        read, what a job's ordinary end asks before anything costlier."""
        try:
            events = (self.path / "cgroup.events").read_text()
        except OSError:
            return True  # cannot tell: the kill finds out
        return "populated 0" not in events

    def kill(self, grace_s: float = procscan.GRACE_S) -> list[str]:
        """Kill every process in the cgroup, remove it; what stayed, described."""
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:  # before Linux 5.14: freeze, kill one by one, thaw
            self._kill_frozen()
        deadline = time.monotonic() + grace_s
        pause = 0.001
        while (left := self._live()) and time.monotonic() < deadline:
            time.sleep(pause)  # killed processes need the scheduler to run once to go
            pause = min(pause * 2, 0.05)
        if not left:
            self.remove()
        why = f"still in the job's cgroup {grace_s:g} s after SIGKILL"
        return [procscan.describe(pid, why) for pid in left]

    def _kill_frozen(self) -> None:
        freeze = self.path / "cgroup.freeze"
        with contextlib.suppress(OSError):
            freeze.write_text("1")
        for pid in procs(self.path):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            freeze.write_text("0")

    def _live(self) -> list[int]:
        return [pid for pid in procs(self.path) if os.path.exists(f"/proc/{pid}")]

    def remove(self) -> None:
        for path in sorted(
            (p for p in self.path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        ):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            self.path.rmdir()


@dataclass
class Containment:
    """How this agent contains its jobs: ``cgroup`` (``base`` is its directory) or
    ``ancestry`` (``reason`` says why not a cgroup)."""

    mode: str
    reason: str = ""
    base: Path | None = None
    _jobs: int = 0

    @classmethod
    def probe(cls, tag: str, wanted: str = "auto") -> Containment:
        """Find out what this machine allows: ``wanted`` is ``auto``, ``cgroup`` or
        ``ancestry`` (agent.toml's ``job_containment``)."""
        if wanted == "ancestry":
            return cls("ancestry", 'job_containment = "ancestry" in agent.toml')
        try:
            mount = cgroup2_root(Path("/proc/self/mountinfo").read_text())
            own = own_cgroup(Path("/proc/self/cgroup").read_text())
        except OSError as exc:
            return cls("ancestry", f"cannot read /proc: {exc}")
        if mount is None or own is None:
            return cls("ancestry", "no cgroup v2 hierarchy is mounted")
        point, shown = mount
        relative = own[len(shown) :] if shown != "/" and own.startswith(shown) else own
        parent = point / relative.lstrip("/")
        sweep(parent)
        base = parent / f"pushjobs-{os.getpid()}-{tag}"
        try:
            base.mkdir()
        except OSError as exc:
            why = exc.strerror or str(exc)
            return cls("ancestry", f"cannot make a cgroup in {parent}: {why}")
        return cls("cgroup", base=base)

    def new_job(self) -> JobCgroup | None:
        """A fresh cgroup for the next job, or None (logged) if none can be made."""
        if self.base is None:
            return None
        self._jobs += 1
        path = self.base / f"job-{self._jobs}"
        try:
            path.mkdir()
        except OSError as exc:
            log.warning("cannot make the job's cgroup %s (%s): tracking it by ancestry", path, exc)
            return None
        return JobCgroup(path)

    def close(self) -> None:
        if self.base is not None:
            JobCgroup(self.base).remove()


def sweep(parent: Path) -> None:
    """Remove the empty cgroups that agents now dead left in ``parent`` (a live agent's,
    named by its pid, is left alone even when it is empty between two jobs)."""
    with contextlib.suppress(OSError):
        for old in parent.glob("pushjobs-*-*"):
            owner = old.name.split("-")[1]
            if owner.isdigit() and os.path.exists(f"/proc/{owner}"):
                continue
            if not any(os.path.exists(f"/proc/{p}") for p in procs(old)):
                JobCgroup(old).remove()
