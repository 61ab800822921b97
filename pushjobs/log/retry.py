"""An outage of the ordered log: when to try again, and what to tell the operator. Pure.

Theory of operation. A log that cannot be written (a full disk, a read-only mount, a
failing disk, an unreachable broker: ``BackendUnavailable``) is not a reason for a daemon
to exit: a restart meets the same log, and under a supervisor the exit becomes a restart
loop that repeats one error forever. The daemon waits instead and tries again; this
object keeps the schedule and the words.

``failed`` is called with each failure and returns when to try next: ``first_s`` after
the first, doubling up to ``max_s``. ``recovered`` is called with each success and ends
the outage. The operator hears one line when an outage starts, one more only if the
reason changes, and one when it ends (with how long it lasted): a log line per attempt
would fill the very disk that is full. The lines are returned, not logged, so the caller
logs them where its other lines go.

Killed at any line: nothing here is durable; a restarted daemon starts a new outage at
its first failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from pushjobs.errors import BackendUnavailable, LogError

FIRST_S = 0.5
MAX_S = 10.0


def retryable(exc: LogError) -> bool:
    """Whether waiting may cure ``exc`` (storage or reachability), not corruption or a
    fence, which no retry changes."""
    return isinstance(exc, BackendUnavailable)


@dataclass
class Outage:
    first_s: float = FIRST_S
    max_s: float = MAX_S
    since: float | None = None
    """When the current outage started (monotonic seconds); None while the log works."""
    reason: str = ""
    attempts: int = 0
    next_try: float = 0.0

    @property
    def active(self) -> bool:
        return self.since is not None

    def failed(self, exc: LogError, now: float) -> tuple[float, str | None]:
        """(when to try again, the line to log or None)."""
        reason = str(exc)
        line: str | None = None
        if self.since is None:
            self.since, self.attempts = now, 0
            line = f"the ordered log cannot be written: {reason}"
        elif reason != self.reason:
            line = f"the ordered log still cannot be written: {reason}"
        self.reason = reason
        self.attempts += 1
        delay = min(self.max_s, self.first_s * 2 ** (self.attempts - 1))
        self.next_try = now + delay
        if line is not None:
            line += f"; trying again every {self.max_s:g} s at most until it can"
        return self.next_try, line

    def due(self, now: float) -> bool:
        return self.since is None or now >= self.next_try

    def recovered(self, now: float) -> str | None:
        """End the outage; the line to log, or None when there was none."""
        if self.since is None:
            return None
        took, attempts = now - self.since, self.attempts
        self.since, self.reason, self.attempts = None, "", 0
        return f"the ordered log can be written again (after {took:.1f} s, {attempts} tries)"

    def status(self, now: float) -> dict[str, object] | None:
        """For ``server.info``: None while the log works."""
        if self.since is None:
            return None
        return {"error": self.reason, "for_s": round(now - self.since, 1), "tries": self.attempts}
