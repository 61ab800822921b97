"""``pushjobs-agent`` (``python -m agent.main``): arguments, logging, signals, exit codes.

Exit codes: 0 stopped on SIGTERM/SIGINT; 1 a start-up error; 2 the configuration is wrong.
SIGHUP reloads the whitelist.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from agent.config import AgentConfig
from agent.daemon import Agent
from agent.reaper import Reaper
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, PushJobsError

log = logging.getLogger("pushjobs.agent")


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pushjobs-agent",
        description="The pushjobs node agent: heartbeats, and whitelisted jobs from the server.",
        epilog="Example: pushjobs-agent --config /etc/pushjobs/agent.toml",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("PUSHJOBS_AGENT_CONFIG") or None,
        help="agent TOML file (default: $PUSHJOBS_AGENT_CONFIG)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    try:
        config = load_config(AgentConfig, args.config, env_prefix="PUSHJOBS_AGENT_")
        name = config.agent.name or "?"
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format=f"%(asctime)s pushjobs-agent {name}: %(message)s",
            stream=sys.stderr,
        )
    except PushJobsError as exc:
        sys.stderr.write(f"pushjobs-agent: error: {exc}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None
    # The watchdog that ends a running job if this agent dies, even by SIGKILL.
    reaper = Reaper()
    try:
        agent = Agent(config, reaper=reaper)
    except PushJobsError as exc:
        reaper.close()
        sys.stderr.write(f"pushjobs-agent: error: {exc}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None

    def stop(signum: int, frame: object) -> None:
        agent.stopping = True

    def hup(signum: int, frame: object) -> None:
        agent.reload_requested = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hup)
    signal.set_wakeup_fd(agent.wake_w)  # a signal wakes the poller at once
    agent.run()
    log.info("stopped")
    raise SystemExit(0)


if __name__ == "__main__":
    main()
