"""The whitelist in force: loaded from its file, reloaded when the file changes or on SIGHUP.

``refresh`` is cheap (one ``stat``) and runs every turn of the agent's loop: a changed
mtime or size reloads the file; ``force`` (SIGHUP) reloads it regardless. A file that no
longer parses is refused with an error and the previous whitelist stays in force; a
missing file means an empty whitelist (every command refused), logged once.

``judge`` is the agent's whole verdict on a commit: the command must be whitelisted (its
captures within the rules of its entry) and every variable the job sets, plain or secret,
must pass the env policy (the agent's ``[env]``, or the entry's own ``env`` list). It is
asked when the commit arrives (a refusal is a nack naming the reason) and again when the
run starts, against the whitelist in force then.

At start-up the agent refuses to run without a whitelist it can use (``check``): a
missing file or one that does not parse is a configuration error naming the file, the
line and the problem, where a running agent keeps the whitelist in force.

Killed at any line: nothing is written, so nothing is lost; the restarted agent loads the
file as it is then.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from agent import whitelist as wl
from agent.envpolicy import EnvPolicy
from pushjobs.errors import ConfigError
from pushjobs.protocol import messages as m

log = logging.getLogger("pushjobs.agent")


class WhitelistFile:
    def __init__(self, path: Path, env: EnvPolicy | None = None) -> None:
        self.path = path
        self.env = env if env is not None else EnvPolicy()
        self.current = wl.Whitelist()
        self._stamp: tuple[int, int] | None = None
        self.refresh(quiet_missing=False)

    def resolve(self, requested: str) -> list[str] | None:
        """The argv for ``requested`` under the whitelist in force, or None."""
        return self.current.resolve(requested)

    def allows(self, requested: str) -> bool:
        return self.current.resolve(requested) is not None

    def judge(self, commit: m.Commit) -> str | None:
        """Why this node refuses ``commit``, or None when it may run."""
        return refusal(self.current, self.env, commit)

    def refresh(self, *, quiet_missing: bool = True, force: bool = False) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._stamp is not None or not quiet_missing:
                log.warning("no whitelist at %s: every command is refused", self.path)
            self.current, self._stamp = wl.Whitelist(), None
            return
        except OSError as exc:
            log.error("cannot read the whitelist %s: %s", self.path, exc)
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
        try:
            self.current = wl.load(self.path)
        except ConfigError as exc:
            log.error("whitelist not reloaded, keeping the previous one: %s", located(exc))
            return
        log.info("whitelist loaded: %s", ", ".join(self.current.names()) or "(empty)")


def check(path: Path) -> wl.Whitelist:
    """The whitelist at ``path``, or a ``ConfigError`` naming file, line and problem: an
    agent must not start without a whitelist it can use (it would nack every job)."""
    if not path.exists():
        raise ConfigError(
            "file not found: an agent needs its whitelist to start (a [commands] table, "
            "one name = command line per entry; empty, it refuses every command); "
            "create it or point agent.whitelist at it",
            path=str(path),
        )
    try:
        return wl.load(path)
    except ConfigError as exc:
        raise located(exc) from None


_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")
_ENTRY_FIELDS = ("command", "env", "allow_dash", "allow_dotdot")


def located(exc: ConfigError) -> ConfigError:
    """``exc`` with the line of the file it is about added to its path, when it can be
    found (a TOML syntax error names it; an entry's line is where its name is written)."""
    if exc.path is None:
        return exc
    problem, line = exc.problem, None
    found = _TOML_LINE.search(problem)
    if found is not None:
        line = int(found.group(1))
        problem = _TOML_LINE.sub("", problem).strip()
    elif exc.key is not None and exc.key.startswith("commands."):
        line = entry_line(Path(exc.path), exc.key.removeprefix("commands."))
    if line is None:
        return exc
    return ConfigError(problem, path=f"{exc.path}:{line}", key=exc.key)


def entry_line(path: Path, key: str) -> int | None:
    """The line on which the whitelist entry ``key`` (maybe ``NAME.env`` and the like) is
    named, or None."""
    names = [key]
    head, _, tail = key.rpartition(".")
    if head and tail in _ENTRY_FIELDS:
        names.insert(0, head)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for name in names:
        spellings = (
            f'"{name}"',
            f"'{name}'",
            f'"{name.replace(chr(92), chr(92) * 2)}"',  # a backslash, escaped in TOML
            f"[commands.{name}]",
        )
        for number, text in enumerate(lines, 1):
            stripped = text.lstrip()
            if stripped.startswith("#"):
                continue
            bare = stripped.startswith((f"{name} ", f"{name}="))
            if bare or any(spelling in text for spelling in spellings):
                return number
    return None


def refusal(whitelist: wl.Whitelist, env: EnvPolicy, commit: m.Commit) -> str | None:
    """Why ``commit`` may not run under ``whitelist`` and ``env``, or None. Pure."""
    found = whitelist.lookup(commit.command)
    if isinstance(found, str):
        return found
    names = [*commit.options.env, *commit.options.secret_env]
    return env.with_allow(found.rule.env).first_refusal(names)
