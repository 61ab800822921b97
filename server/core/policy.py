"""The server's job policy: which jobs wait for a second admin, which are refused. Pure.

Theory of operation. ``[policy]`` in ``server.toml`` is a ``Policy``. The leader asks it
about every job it is about to create (``judge``), with what the job is: its selectors as
typed, the number of nodes they chose, how many nodes each glob selector matched, its
command and its requester's role. The answer is a ``Verdict``:

- ``forbidden``: why the job is refused outright (``forbid_bare_star`` and a bare ``*``);
  nothing is written, nothing is created;
- ``rule``: the first rule that matched, in words (``"more than 50 targets (policy
  .max_targets)"``); the job is created ``awaiting_approval`` and stays so until an admin
  other than its requester approves it (it then votes, as any job), an admin rejects it,
  or ``approval_expiry_s`` passes (rejected or expired: it ends ``rejected`` and no node
  was ever asked anything);
- neither: the job starts at once, as it always did.

The rules, looked at in this order (0 or an empty list turns one off; without a
``[policy]`` table no job waits and nothing is refused):

    max_targets = N        a job on more than N nodes
    max_glob_matches = N   one glob selector (``web-*``, ``tag=eu-*``) matching more than N
    commands = [RE, ...]   a command a regular expression finds (``re.search``: anchor it,
                           ``^reboot$``, to match a whole name only)
    roles = [ROLE, ...]    any job by a key of one of these roles (``writer``)

Who may decide is ``refusal``'s to say: an approval must come from a key other than the
requester's (for a schedule's fire, the key that added the schedule: ``Hold.requester``;
the API layer has checked already that it is an accepted admin key); a rejection may come
from any admin, the requester too (withdrawing its own job).

Killed at any line: nothing here holds state; a job's hold (its rule and expiry) is in
its snapshot, so the next leader sees the same rule and the same deadline.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from server.core.jobparams import MAX_SECONDS

ROLES = ("admin", "writer", "reader")
DEFAULT_EXPIRY_S = 3600.0
_GLOB_CHARS = frozenset("*?[")


def is_glob(selector: str) -> bool:
    return any(char in _GLOB_CHARS for char in selector)


def is_bare_star(selector: str) -> bool:
    """``*`` (or ``**``): every node of the fleet, whatever its name."""
    text = selector.strip()
    return bool(text) and set(text) == {"*"}


@dataclass(frozen=True, slots=True)
class Verdict:
    rule: str | None = None
    """The rule that holds the job for approval, in words; None: it needs none."""
    forbidden: str | None = None
    """Why the job is refused outright; None: it is not."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A job held for approval: the rule, until when (wall ms), and whose job it is: the
    key that asked for it, or for a schedule's fire the key that added the schedule (who
    may not approve it either)."""

    rule: str
    expires_ms: int
    requester: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "expires_ms": self.expires_ms, "requester": self.requester}


@dataclass(frozen=True, slots=True)
class Policy:
    max_targets: int = 0
    """A job on more than this many nodes waits for approval (0: no such rule)."""
    max_glob_matches: int = 0
    """A job with a glob selector matching more than this many nodes waits (0: none)."""
    commands: tuple[str, ...] = ()
    """A job whose command one of these regular expressions finds waits for approval."""
    roles: tuple[str, ...] = ()
    """Every job requested by a key of one of these roles waits for approval."""
    forbid_bare_star: bool = False
    """Refuse a bare ``*`` selector outright: name nodes, or a narrower glob."""
    approval_expiry_s: float = DEFAULT_EXPIRY_S
    """How long a job waits for approval before it ends ``rejected`` (approval expired)."""

    def check(self) -> Iterable[tuple[str, str]]:
        for bound in ("max_targets", "max_glob_matches"):
            if getattr(self, bound) < 0:
                yield bound, "must not be negative (0 turns the rule off)"
        for pattern in self.commands:
            try:
                re.compile(pattern)
            except re.error as exc:
                yield "commands", f"{pattern!r} is not a regular expression: {exc}"
        for role in self.roles:
            if role not in ROLES:
                yield "roles", f"unknown role {role!r}: one of {', '.join(ROLES)}"
        if not 0 < self.approval_expiry_s <= MAX_SECONDS:  # NaN too
            yield "approval_expiry_s", "must be greater than 0 and at most a year (31536000)"

    @property
    def expiry_ms(self) -> int:
        return round(self.approval_expiry_s * 1000)

    def judge(
        self,
        selectors: Sequence[str],
        targets: int,
        glob_matches: Mapping[str, int],
        command: str,
        role: str | None,
    ) -> Verdict:
        """What the policy says of a job (see the module docstring); ``glob_matches``
        counts the nodes each glob selector matched."""
        if self.forbid_bare_star and any(is_bare_star(s) for s in selectors):
            return Verdict(
                forbidden="a bare '*' target is forbidden by the server's policy "
                "(policy.forbid_bare_star): name the nodes, or a narrower glob or query"
            )
        if self.max_targets and targets > self.max_targets:
            return Verdict(f"{targets} targets, more than {self.max_targets} (policy.max_targets)")
        if self.max_glob_matches:
            for selector, count in glob_matches.items():
                if count > self.max_glob_matches:
                    return Verdict(
                        f"{selector!r} matches {count} nodes, more than "
                        f"{self.max_glob_matches} (policy.max_glob_matches)"
                    )
        for pattern in self.commands:
            if re.search(pattern, command):
                return Verdict(f"command {command!r} matches {pattern!r} (policy.commands)")
        if role is not None and role in self.roles:
            return Verdict(f"every job by a {role} key (policy.roles)")
        return Verdict()


def refusal(requested_by: str, caller: str, *, approve: bool) -> str | None:
    """Why ``caller`` may not decide on a job ``requested_by`` asked for; None: it may."""
    if approve and caller == requested_by:
        return (
            f"{caller} requested this job and cannot approve it: another admin must "
            "(pushjobs job approve, with a different admin key)"
        )
    return None
