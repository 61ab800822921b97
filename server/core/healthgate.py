"""Halting a rolling job on a health signal (``job start --halt-if``). Pure.

Theory of operation. A batch job (``batch.py``) may name a *signal*: a check command the
leader runs on its own host (``--halt-if CMD``: healthy while it exits 0), or a
Prometheus alert (``--halt-if-alert NAME``: healthy while no alert of that name fires on
the server's ``[halt] prometheus_url``). The leader's shell runs it (``healthchecks.py``)
and hands the answer back (``Job.health``); this module is the job's side of it:

- **between batches**: the window starts new nodes only on a passing check that was
  asked after its previous start (for the first, after the vote ended). When the window
  would start nodes and has no such check, it asks for one (a ``Check`` effect,
  ``effects.py``) and starts nothing until the answer: each wave of starts follows a
  passing check that saw the fleet after the wave before. Counted in checks asked, not
  in milliseconds: a check asked in the same millisecond as a start cannot clear it;
- **on an interval**: while nodes still wait their turn, a check runs every
  ``every_ms`` too, so a signal that fires while a long batch runs stops the next one
  without waiting for a slot to free;
- **it fires**: a check that fails (non-zero exit, killed at its ``timeout_ms``, cannot
  start; the alert firing, Prometheus unreachable or answering nonsense) halts the job:
  the waiting nodes (and those waited for offline) are ``skipped`` with the signal in
  their reason, the in-flight ones finish, and the job ends ``halted`` with the signal
  in its ``halt_reason``. A check the shell never answers counts as failed
  ``timeout_ms + ANSWER_GRACE_MS`` after it was asked. Not knowing that the service is
  healthy is no reason to go on: that is the point of the gate.

An answer carries the ``seq`` of the check it answers; one for an older check, or for a
job no longer running, changes nothing.

Killed at any line: nothing here is durable. A new leader (or a restarted one) has no
passing check, so it asks for a fresh one before its first start; a check that was
running under the old leader is forgotten with it. A halt is durable through its
effects: the skipped nodes and the job's ``halt_reason`` are in its snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_EVERY_S = 30.0
DEFAULT_TIMEOUT_S = 10.0
ANSWER_GRACE_MS = 5_000
"""How long past its timeout a check's answer may be late (the shell kills the check at
its timeout and answers then) before the job stops waiting for it and halts."""


@dataclass(frozen=True, slots=True)
class HaltSpec:
    """What a job's ``options["halt_if"]`` holds: one signal, how often, how long."""

    check: str | None = None  # a command on the leader's host; healthy while it exits 0
    alert: str | None = None  # a Prometheus alert name; healthy while it does not fire
    every_ms: int = round(DEFAULT_EVERY_S * 1000)
    timeout_ms: int = round(DEFAULT_TIMEOUT_S * 1000)

    def describe(self) -> str:
        """The signal in words, as a reason names it."""
        if self.check is not None:
            return f"check {self.check!r}"
        return f"Prometheus alert {self.alert!r}"

    def to_options(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "alert": self.alert,
            "every_s": self.every_ms / 1000,
            "timeout_s": self.timeout_ms / 1000,
        }

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> HaltSpec | None:
        """The spec ``options["halt_if"]`` holds; None for a job that names no signal.

        ValueError/TypeError on a damaged value (the request was checked on the way in)."""
        halt = options.get("halt_if")
        if halt is None:
            return None
        if not isinstance(halt, Mapping):
            raise ValueError(f"halt_if options must be a table, not {halt!r}")
        check, alert = halt.get("check"), halt.get("alert")
        if (check is None) == (alert is None):
            raise ValueError("halt_if names exactly one of a check and an alert")
        return cls(
            check=None if check is None else str(check),
            alert=None if alert is None else str(alert),
            every_ms=round(float(halt.get("every_s") or DEFAULT_EVERY_S) * 1000),
            timeout_ms=round(float(halt.get("timeout_s") or DEFAULT_TIMEOUT_S) * 1000),
        )


class Gate:
    """One job's checks: the one asked and not answered, whether one asked since the
    window's last start passed. Not persisted (see the module docstring)."""

    __slots__ = ("asked_ms", "cleared", "due_ms", "seq", "spec", "spent_seq")

    def __init__(self, spec: HaltSpec) -> None:
        self.spec = spec
        self.seq = 0  # the last check asked
        self.asked_ms: int | None = None  # the check in flight: when it was asked
        self.cleared = False  # a check asked after the last start passed
        self.spent_seq = 0  # checks up to this one were asked before the last start
        self.due_ms: int | None = None  # the next interval check

    def spend(self) -> None:
        """Nodes started: only a check asked from now on clears the next start (one in
        flight now was asked before it)."""
        self.cleared = False
        self.spent_seq = self.seq

    def ask(self, now_ms: int) -> int | None:
        """Ask for a check now; its seq, or None if one is in flight already."""
        if self.asked_ms is not None:
            return None
        self.seq += 1
        self.asked_ms = now_ms
        self.due_ms = now_ms + self.spec.every_ms
        return self.seq

    def answer(self, seq: int, ok: bool) -> bool:
        """Take the answer to check ``seq``; False for a stale one (changes nothing)."""
        if seq != self.seq or self.asked_ms is None:
            return False
        self.asked_ms = None
        if ok and seq > self.spent_seq:
            self.cleared = True
        return True

    def interval_due(self, now_ms: int) -> bool:
        return self.asked_ms is None and self.due_ms is not None and now_ms >= self.due_ms

    def overdue(self, now_ms: int) -> bool:
        """The check in flight went unanswered past its timeout and grace."""
        return self.asked_ms is not None and now_ms >= self.answer_by_ms()

    def answer_by_ms(self) -> int:
        return (self.asked_ms or 0) + self.spec.timeout_ms + ANSWER_GRACE_MS

    def deadline_ms(self) -> int | None:
        """When the gate next needs time: the answer's bound, else the interval check."""
        if self.asked_ms is not None:
            return self.answer_by_ms()
        return self.due_ms
