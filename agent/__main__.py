"""``pushjobs-agent`` (``python -m agent``): arguments, logging, signals, exit codes.

Exit codes (the CLI's table, ``pushjobs.cli.exitcodes``): 0 stopped on SIGTERM/SIGINT
(a running job is aborted first); 1 a start-up error; 2 bad arguments; 9 the
configuration is wrong (a file or a value, a missing or invalid whitelist: an agent that
would nack every job must not look healthy). SIGHUP reopens the log file (``--log-file``,
for logrotate) and reloads the whitelist.
"""

from __future__ import annotations

import sys

# No OpenSSL for hashing in the agent: ``hashlib`` without ``_hashlib`` uses Python's own
# SHA-2 and HMAC (the same digests), and the agent's 3.4 MiB of libcrypto are never mapped
# (bench/footprint.py: ~27 MiB RSS idle, not ~30). An agent hashes a few messages a second;
# the simulator and the server, which hash tens of thousands, never import this module.
# Only if nothing imported hashlib yet: a process that already has it keeps OpenSSL's.
if "hashlib" not in sys.modules:
    sys.modules.setdefault("_hashlib", None)  # type: ignore[arg-type]

import argparse
import logging
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from agent import subreaper
from agent.agentconfig import CONFIG_FILE, AgentConfig
from agent.agentd import Agent
from agent.reaper import Reaper
from agent.whitelist_file import check as check_whitelist
from pushjobs import __version__, logsetup, paths
from pushjobs.cli.exitcodes import Exit
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, KeyFileError, PushJobsError

log = logging.getLogger("pushjobs.agent")
PROGRAM = "pushjobs-agent"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The pushjobs node agent: heartbeats, and whitelisted jobs from the server.",
        epilog=f"Exit codes: 0 stopped (SIGTERM), 1 failed, 2 bad arguments, 9 bad configuration.\n"
        f"SIGHUP reopens the log file and reloads the whitelist.\n"
        f"Example: {PROGRAM} --config /etc/pushjobs/agent.toml --log-format json",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("PUSHJOBS_AGENT_CONFIG") or None,
        help=f"agent TOML file (default: $PUSHJOBS_AGENT_CONFIG, else "
        f"{paths.config_dir() / CONFIG_FILE} if present)",
    )
    parser.add_argument("--version", action="version", version=f"{PROGRAM} {__version__}")
    logsetup.add_arguments(parser)
    return parser.parse_args(argv)


def exit_code(exc: PushJobsError) -> Exit:
    """9 for a configuration error (as the CLI), 1 for anything else: a systemd restart may
    cure a port in use or a key file created since, never a wrong config file."""
    return Exit.CONFIG if isinstance(exc, ConfigError) else Exit.FAILED


def require(config: AgentConfig, path: Path | None) -> None:
    """The checks ``load_config`` skips when the file has no ``[agent]`` table (or there
    is no file): without them a bare agent fails later on a key file named ``.key``."""
    for name, problem in config.agent.check():
        if path is None:
            where = paths.config_dir() / CONFIG_FILE
            raise ConfigError(
                f"no agent configuration (pass --config FILE, set $PUSHJOBS_AGENT_CONFIG or "
                f"create {where}): agent.{name} {problem}"
            )
        raise ConfigError(problem, path=str(path), key=f"agent.{name}")


def _fail(exc: PushJobsError, hint: str = "") -> SystemExit:
    sys.stderr.write(f"{PROGRAM}: error: {exc}{hint}\n")
    return SystemExit(int(exit_code(exc)))


def key_hint(config: AgentConfig) -> str:
    """How to make the key file the agent could not find, if one is missing."""
    section = config.agent
    key = section.key_path()
    if not key.exists():
        return (
            f" (agent.key_file: make it with: pushjobs key gen {section.name} --dir {key.parent})"
        )
    if section.server_key is not None and not section.server_key.exists():
        return " (agent.server_key: copy server.pub here from the server's key directory)"
    return ""


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    try:
        path = args.config if args.config is not None else paths.default_config(CONFIG_FILE)
        config = load_config(AgentConfig, path, env_prefix="PUSHJOBS_AGENT_")
        require(config, path)
        check_whitelist(config.agent.whitelist_path())
        logs = logsetup.from_arguments(f"{PROGRAM} {config.agent.name or '?'}", args)
    except PushJobsError as exc:
        raise _fail(exc) from None
    # The watchdog that ends a running job if this agent dies, even by SIGKILL.
    reaper = Reaper()
    # A job's orphans (a double fork) come to this process, where they are found and reaped.
    adopter = os.getpid() if subreaper.become() else None
    try:
        agent = Agent(config, reaper=reaper, adopter=adopter)
    except PushJobsError as exc:
        reaper.close()
        raise _fail(exc, key_hint(config) if isinstance(exc, KeyFileError) else "") from None
    log.info("%s %s started (config: %s)", PROGRAM, __version__, path or "built-in defaults")

    def stop(signum: int, frame: object) -> None:
        agent.stopping = True

    def hup(signum: int, frame: object) -> None:
        log.info("SIGHUP: %s; reloading the whitelist", logs.reopen())
        agent.reload_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hup)
    signal.set_wakeup_fd(agent.wake_w)  # a signal wakes the poller at once
    agent.run()
    log.info("stopped")
    raise SystemExit(int(Exit.OK))


if __name__ == "__main__":
    main()
