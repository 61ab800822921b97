"""Which environment variables a job may set on this node. Pure.

A job's ``env`` (and ``secret_env``) reach the command's process, so a writer who may
start ``true`` could otherwise choose the dynamic loader's preloads (``LD_PRELOAD``), the
directories searched for ``true`` itself (``PATH``), or code an interpreter runs first
(``PYTHONSTARTUP``, ``BASH_ENV``). The policy:

- a name must be ``[A-Za-z_][A-Za-z0-9_]*`` (anything else is refused, whatever else
  the configuration says);
- it must match one of the ``allow`` patterns (shell globs; default ``["*"]``);
- it must not match a deny pattern: the built-in ``DEFAULT_DENY`` and any extra ``deny``
  patterns configured. A name written out in full in ``allow`` (no wildcard) is accepted
  even when a deny pattern matches it: the one way to let, say, ``PATH`` through, and
  only on purpose. A pattern never lets a denied name through.

Configured in ``agent.toml`` (``[env] allow``/``deny``) and, for one command, in its
whitelist entry (``env = [...]`` replaces ``allow`` for that command).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

DEFAULT_DENY: tuple[str, ...] = (
    "LD_*",
    "PATH",
    "*PATH",
    "PYTHON*",
    "BASH_ENV",
    "ENV",
    "IFS",
)
"""Names that change what runs rather than what it is told: the loader, the search path,
interpreter start-up hooks and shell word splitting."""


def valid_name(name: str) -> bool:
    return NAME.fullmatch(name) is not None


def check_patterns(patterns: Iterable[object]) -> str | None:
    """Why ``patterns`` is not a usable list of name patterns, or None."""
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            return f"expected non-empty strings, got {pattern!r}"
        if not re.fullmatch(r"[A-Za-z0-9_*?\[\]!-]+", pattern):
            return f"{pattern!r} is not a variable name or a glob of one"
    return None


@dataclass(frozen=True, slots=True)
class EnvPolicy:
    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()  # on top of DEFAULT_DENY

    def with_allow(self, allow: tuple[str, ...] | None) -> EnvPolicy:
        """This policy with a whitelist entry's own ``allow`` (None: keep this one's)."""
        return self if allow is None else EnvPolicy(allow, self.deny)

    def refusal(self, name: str) -> str | None:
        """Why ``name`` may not be set by a job, or None when it may."""
        if not valid_name(name):
            return f"{name!r} is not a valid variable name"
        literal = name in self.allow
        if not literal and not any(fnmatchcase(name, p) for p in self.allow):
            return f"{name} is not in this node's env allow list"
        if literal:
            return None
        for pattern in (*DEFAULT_DENY, *self.deny):
            if fnmatchcase(name, pattern):
                return f"{name} is refused by this node's env policy (matches {pattern!r})"
        return None

    def first_refusal(self, names: Iterable[str]) -> str | None:
        """The reason the first refused name is refused, in sorted order, or None."""
        for name in sorted(names):
            reason = self.refusal(name)
            if reason is not None:
                return f"env {reason}"
        return None
