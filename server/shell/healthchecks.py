"""Running rolling jobs' health signals on the leader's host (``job start --halt-if``).

Theory of operation. A batch job with a health signal asks for a check with a ``Check``
effect (``healthgate.py`` says when); the leader hands it here after its flush. Each
check runs on a thread of its own, so the loop never waits for one:

- a **check command** (``--halt-if CMD``) runs as ``/bin/sh -c CMD`` in a session of
  its own, from ``/``, with stdin closed and a small environment (``PATH``, ``HOME``,
  ``LANG`` and the job's ``PUSHJOBS_*`` variables: not the server's own environment,
  which may hold its secrets). Exit 0 passes; any other exit, a signal, or its timeout
  (the whole process group is killed then) fails, with the first line it printed. Only
  a command the server's ``[halt] checks`` lists, as written there, is ever run: the
  leader refuses any other at ``job.start`` (``HaltSettings.refusal``), so a user key
  cannot make the server run a command of its choosing;
- a **Prometheus alert** (``--halt-if-alert NAME``) is read from the ``[halt]
  prometheus_url`` API (``GET /api/v1/alerts``): an alert of that name in state
  ``firing`` fails (``pending`` does not: it has not met its ``for:`` yet); an answer
  that is not Prometheus's, too large, or no answer in the timeout fails too.

An answer goes back through a queue, and a byte on a socket pair wakes the loop's poll
(``fd``); ``take`` collects the answers. At most ``max_running`` checks run at once (each
job has one at a time); more wait their turn here, in order.

Leadership: ``forget`` (the server stood by, or took over again) drops the answers of
checks started before it: a job restored by a new term starts its checks' numbering
again, and must not take an old term's answer for its own.

Killed at any line: nothing here is durable; an unanswered check is asked again by the
next leader's job (``healthgate.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass

from server.core.effects import Check

MAX_DETAIL_CHARS = 300
MAX_ALERTS_BYTES = 16 * 1024 * 1024
"""The most of Prometheus's answer read: thousands of alerts take a few MB."""
_SAFE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class Answer:
    job_id: str
    seq: int
    ok: bool
    detail: str


class HealthChecks:
    def __init__(self, prometheus_url: str = "", max_running: int = 16) -> None:
        self.prometheus_url = prometheus_url
        self.max_running = max_running
        self._answers: queue.SimpleQueue[tuple[int, Answer]] = queue.SimpleQueue()
        self._waiting: deque[Check] = deque()
        self._running = 0
        self._generation = 0
        self._pair: tuple[socket.socket, socket.socket] | None = None

    @property
    def fd(self) -> int:
        """Readable once an answer is in: for the loop's poller (made on first use)."""
        return self._wakeup()[0].fileno()

    def _wakeup(self) -> tuple[socket.socket, socket.socket]:
        if self._pair is None:
            read, write = socket.socketpair()
            read.setblocking(False)
            write.setblocking(False)
            self._pair = (read, write)
        return self._pair

    @property
    def running(self) -> int:
        return self._running

    def start(self, check: Check) -> None:
        """Run ``check`` now, or as soon as fewer than ``max_running`` run."""
        if self._running >= self.max_running:
            self._waiting.append(check)
            return
        self._running += 1
        wake = self._wakeup()[1]
        thread = threading.Thread(
            target=self._run,
            args=(check, self._generation, wake),
            name=f"check-{check.job_id}",
            daemon=True,
        )
        thread.start()

    def take(self) -> list[Answer]:
        """The answers in since the last call (of the current term), in order."""
        if self._pair is not None:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while self._pair[0].recv(4096):
                    pass
        out: list[Answer] = []
        while True:
            try:
                generation, answer = self._answers.get_nowait()
            except queue.Empty:
                break
            self._running -= 1
            if generation == self._generation:
                out.append(answer)
        while self._waiting and self._running < self.max_running:
            self.start(self._waiting.popleft())
        return out

    def forget(self) -> None:
        """Drop what was asked before now (see the module docstring)."""
        self._generation += 1
        self._waiting.clear()

    def close(self) -> None:
        if self._pair is not None:
            for sock in self._pair:
                sock.close()
            self._pair = None

    def _run(self, check: Check, generation: int, wake: socket.socket) -> None:
        timeout_s = check.spec.timeout_ms / 1000
        try:
            if check.spec.check is not None:
                ok, detail = run_command(check.spec.check, timeout_s, dict(check.env))
            else:
                ok, detail = alert_state(self.prometheus_url, check.spec.alert or "", timeout_s)
        except Exception as exc:  # any failure is an answer: the check failed
            ok, detail = False, f"could not be run: {exc}"
        self._answers.put(
            (generation, Answer(check.job_id, check.seq, ok, detail[:MAX_DETAIL_CHARS]))
        )
        with contextlib.suppress(OSError):  # full (answers wake it already) or closed
            wake.send(b"!")


def run_command(command: str, timeout_s: float, job_env: dict[str, str]) -> tuple[bool, str]:
    """Run a check command (see the module docstring): (passed, what happened)."""
    env = {name: os.environ[name] for name in _SAFE_ENV if name in os.environ}
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update(job_env)
    with tempfile.TemporaryFile() as output:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            return False, f"could not start: {exc}"
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return False, f"timed out after {timeout_s:g} s"
        output.seek(0)
        said = first_line(output.read(4096).decode("utf-8", "replace"))
    if code == 0:
        return True, "passed"
    how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
    return False, f"failed ({how})" + (f": {said}" if said else "")


def first_line(text: str) -> str:
    for raw in text.splitlines():
        line = raw.strip()
        if line:
            return "".join(c if c.isprintable() else "?" for c in line)
    return ""


def alert_state(url: str, name: str, timeout_s: float) -> tuple[bool, str]:
    """Whether Prometheus at ``url`` has no alert ``name`` firing: (passed, what it said)."""
    if not url:
        return False, "no [halt] prometheus_url is set on this server"
    where = url.rstrip("/") + "/api/v1/alerts"
    request = urllib.request.Request(where, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            body = reply.read(MAX_ALERTS_BYTES + 1)
    except urllib.error.HTTPError as exc:
        return False, f"Prometheus at {url} answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"Prometheus at {url} could not be asked: {reason}"
    if len(body) > MAX_ALERTS_BYTES:
        return False, f"Prometheus at {url} answered more than {MAX_ALERTS_BYTES:,} bytes"
    try:
        doc = json.loads(body)
        if doc.get("status") != "success":
            return False, f"Prometheus at {url} answered {doc.get('status')!r}: {doc.get('error')}"
        alerts = doc["data"]["alerts"]
        firing = [
            a
            for a in alerts
            if a.get("labels", {}).get("alertname") == name and a.get("state") == "firing"
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False, f"Prometheus at {url} answered something that is not its alerts API"
    if not firing:
        return True, "not firing"
    labels = {k: v for k, v in firing[0].get("labels", {}).items() if k != "alertname"}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return False, f"firing ({len(firing)} alert{'s' if len(firing) != 1 else ''})" + (
        f": {shown}" if shown else ""
    )
