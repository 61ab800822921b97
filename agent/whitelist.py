"""The agent's whitelist: which command names a server may ask for, and what each runs.

A TOML file maps a command name to a command line:

    [commands]
    uptime = "uptime"
    "restart-(?P<svc>[a-z0-9-]+)" = "systemctl restart {svc}"

A key is an exact name, or, when it is not found as an exact name, a regular expression
matched against the whole requested name; its named groups are substituted into the
command line. Captured text is restricted to a safe alphabet before it can reach a
shell-free argv, so a request like ``restart-x;rm -rf /`` matches nothing. The file is
read whole and validated (every regex compiles, every placeholder is a group of its
pattern); a bad file is refused with an error naming the key, and the previous whitelist
stays in force (``agent.whitelist_file`` decides when to reload).
"""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pushjobs.config import read_toml
from pushjobs.errors import ConfigError

_SAFE_CAPTURE = re.compile(r"[A-Za-z0-9._@:/+=-]{1,256}")


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    command: str
    pattern: re.Pattern[str] | None  # None: an exact name


@dataclass(frozen=True, slots=True)
class Whitelist:
    rules: tuple[Rule, ...] = ()

    def resolve(self, requested: str) -> list[str] | None:
        """The argv for ``requested``, or None when it is not whitelisted."""
        for rule in self.rules:
            if rule.pattern is None and rule.name == requested:
                return shlex.split(rule.command)
        for rule in self.rules:
            if rule.pattern is None:
                continue
            match = rule.pattern.fullmatch(requested)
            if match is None:
                continue
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            if not all(_SAFE_CAPTURE.fullmatch(v) for v in groups.values()):
                return None
            # Substitute per argv word so a capture can never split into several words.
            return [word.format_map(groups) for word in shlex.split(rule.command)]
        return None

    def names(self) -> list[str]:
        return [rule.name for rule in self.rules]


def parse(table: Mapping[str, object], where: str) -> Whitelist:
    commands = table.get("commands", {})
    extra = sorted(set(table) - {"commands"})
    if extra:
        raise ConfigError("unknown key (expected a [commands] table)", path=where, key=extra[0])
    if not isinstance(commands, Mapping):
        raise ConfigError("expected a table", path=where, key="commands")
    rules = []
    for name, command in commands.items():
        key = f"commands.{name}"
        if not isinstance(command, str) or not command.strip():
            raise ConfigError("expected a non-empty command line", path=where, key=key)
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise ConfigError(
                f"cannot split the command line: {exc}", path=where, key=key
            ) from None
        fields = {f for word in words for _, f, _, _ in string.Formatter().parse(word) if f}
        is_exact = re.fullmatch(r"[A-Za-z0-9._-]+", name) is not None and not fields
        if is_exact:
            rules.append(Rule(name, command, None))
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
        rules.append(Rule(name, command, pattern))
    return Whitelist(tuple(rules))


def load(path: Path) -> Whitelist:
    return parse(read_toml(path), str(path))
