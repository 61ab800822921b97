"""The agent's whitelist: which command names a server may ask for, and what each runs.

A TOML file maps a command name to a command line, or to a table for an entry that needs
more than that:

    [commands]
    uptime = "uptime"
    "restart-(?P<svc>[a-z0-9-]+)" = "systemctl restart {svc}"

    [commands."cat-(?P<f>.+)"]
    command = "cat /srv/files/{f}"
    env = ["LANG", "LC_*"]   # the variables a job of this command may set (replaces the
                             # agent's [env] allow; deny still applies, see envpolicy.py)
    allow_dotdot = false     # captures may contain a '..' path segment
    allow_dash = false       # captures may start with '-'

A key is an exact name, or, when it is not found as an exact name, a regular expression
matched against the whole requested name; its named groups are substituted into the
command line, each within one argv word. Captured text is restricted to a safe alphabet
before it can reach the argv, so a request like ``restart-x;rm -rf /`` matches nothing;
and unless its entry opts in, a capture may not start with ``-`` (``show---help`` would
make ``systemctl restart --help``, an option where an operand was meant) nor contain a
``..`` path segment (``cat-../secret`` would climb out of ``/srv/files``). The file is
read whole and validated (every regex compiles, every placeholder is a group of its
pattern, every env pattern is a name or glob); a bad file is refused with an error naming
the key, and the previous whitelist stays in force (``agent.whitelist_file`` decides when
to reload).
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.envpolicy import check_patterns
from pushjobs.config import read_toml
from pushjobs.errors import ConfigError

_SAFE_CAPTURE = re.compile(r"[A-Za-z0-9._@:/+=-]{1,256}")
_ENTRY_KEYS = frozenset({"command", "env", "allow_dash", "allow_dotdot"})


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    command: str
    pattern: re.Pattern[str] | None  # None: an exact name
    env: tuple[str, ...] | None = None  # None: the agent's [env] allow
    allow_dash: bool = False
    allow_dotdot: bool = False


@dataclass(frozen=True, slots=True)
class Resolved:
    """A whitelisted request: the argv to run and the entry that allowed it."""

    argv: list[str]
    rule: Rule


def capture_refusal(group: str, value: str, rule: Rule) -> str | None:
    """Why a captured ``value`` may not reach ``rule``'s command line, or None."""
    if not _SAFE_CAPTURE.fullmatch(value):
        return f"capture {group}={value!r} has characters outside [A-Za-z0-9._@:/+=-]"
    if value.startswith("-") and not rule.allow_dash:
        return f"capture {group}={value!r} starts with '-' (an option, not an operand)"
    if ".." in value.split("/") and not rule.allow_dotdot:
        return f"capture {group}={value!r} contains a '..' path segment"
    return None


@dataclass(frozen=True, slots=True)
class Whitelist:
    rules: tuple[Rule, ...] = ()

    def lookup(self, requested: str) -> Resolved | str:
        """The argv and entry for ``requested``, or why it may not run."""
        for rule in self.rules:
            if rule.pattern is None and rule.name == requested:
                return Resolved(shlex.split(rule.command), rule)
        for rule in self.rules:
            if rule.pattern is None:
                continue
            match = rule.pattern.fullmatch(requested)
            if match is None:
                continue
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            for group, value in sorted(groups.items()):
                reason = capture_refusal(group, value, rule)
                if reason is not None:
                    return f"command {requested!r} refused: {reason}"
            # Substitute per argv word so a capture can never split into several words.
            argv = [word.format_map(groups) for word in shlex.split(rule.command)]
            return Resolved(argv, rule)
        return f"command {requested!r} is not whitelisted"

    def resolve(self, requested: str) -> list[str] | None:
        """The argv for ``requested``, or None when it is not whitelisted."""
        found = self.lookup(requested)
        return found.argv if isinstance(found, Resolved) else None

    def names(self) -> list[str]:
        return [rule.name for rule in self.rules]


def _entry(name: str, value: object, where: str) -> Rule:
    """One ``[commands]`` entry, a command line or a table, as a rule without its pattern."""
    key = f"commands.{name}"
    if not isinstance(value, Mapping):
        if not isinstance(value, str) or not value.strip():
            raise ConfigError("expected a non-empty command line", path=where, key=key)
        return Rule(name, value, None)
    extra = sorted(set(value) - _ENTRY_KEYS)
    if extra:
        known = ", ".join(sorted(_ENTRY_KEYS))
        raise ConfigError(f"unknown key (expected {known})", path=where, key=f"{key}.{extra[0]}")
    command = value.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError("expected a non-empty command line", path=where, key=f"{key}.command")
    env = value.get("env")
    if env is not None:
        problem = "expected a list" if not isinstance(env, list) else check_patterns(env)
        if problem is not None:
            raise ConfigError(problem, path=where, key=f"{key}.env")
    flags = {}
    for flag in ("allow_dash", "allow_dotdot"):
        flags[flag] = value.get(flag, False)
        if not isinstance(flags[flag], bool):
            raise ConfigError("expected true or false", path=where, key=f"{key}.{flag}")
    return Rule(
        name,
        command,
        None,
        None if env is None else tuple(env),
        allow_dash=flags["allow_dash"],
        allow_dotdot=flags["allow_dotdot"],
    )


def parse(table: Mapping[str, object], where: str) -> Whitelist:
    commands = table.get("commands", {})
    extra = sorted(set(table) - {"commands"})
    if extra:
        raise ConfigError("unknown key (expected a [commands] table)", path=where, key=extra[0])
    if not isinstance(commands, Mapping):
        raise ConfigError("expected a table", path=where, key="commands")
    rules = []
    for name, value in commands.items():
        key = f"commands.{name}"
        rule = _entry(name, value, where)
        try:
            words = shlex.split(rule.command)
        except ValueError as exc:
            raise ConfigError(
                f"cannot split the command line: {exc}", path=where, key=key
            ) from None
        fields = {f for word in words for _, f, _, _ in string.Formatter().parse(word) if f}
        if re.fullmatch(r"[A-Za-z0-9._-]+", name) is not None and not fields:
            rules.append(rule)
            continue
        try:
            pattern = re.compile(name)
        except re.error as exc:
            raise ConfigError(f"invalid regular expression: {exc}", path=where, key=key) from None
        missing = sorted(fields - set(pattern.groupindex))
        if missing:
            raise ConfigError(
                f"placeholder {{{missing[0]}}} is not a named group of the pattern",
                path=where,
                key=key,
            )
        rules.append(
            Rule(name, rule.command, pattern, rule.env, rule.allow_dash, rule.allow_dotdot)
        )
    return Whitelist(tuple(rules))


def load(path: Path) -> Whitelist:
    return parse(read_toml(path), str(path))
