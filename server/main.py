"""``pushjobs-server`` (``python -m server.main``): arguments, logging, signals, exit codes.

Exit codes (the CLI's table, ``pushjobs.cli.exitcodes``): 0 stopped on SIGTERM/SIGINT;
1 the ordered log failed (a restart recovers from the log) or another start-up error;
2 bad arguments; 9 the configuration is wrong (a file or a value).
SIGHUP reopens the log file (``--log-file``, for logrotate); the registry needs no
reload, it is re-read when it changes.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pushjobs import __version__, collector, logsetup, paths
from pushjobs.cli.exitcodes import Exit
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, KeyFileError, LogError, PushJobsError
from server.daemon import Server
from server.settings import CONFIG_FILE, ServerConfig

log = logging.getLogger("pushjobs.server")
PROGRAM = "pushjobs-server"


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The pushjobs server: node liveness, job coordination, the API.",
        epilog=f"Exit codes: 0 stopped (SIGTERM), 1 failed, 2 bad arguments, 9 bad configuration.\n"
        f"SIGHUP reopens the log file.\n"
        f"Example: {PROGRAM} --config /etc/pushjobs/server.toml --log-format json",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help=f"server TOML file (default: {paths.config_dir() / CONFIG_FILE} if present, "
        "else built-in defaults)",
    )
    parser.add_argument("--version", action="version", version=f"{PROGRAM} {__version__}")
    logsetup.add_arguments(parser)
    return parser.parse_args(argv)


def exit_code(exc: PushJobsError) -> Exit:
    """9 for a configuration error (as the CLI), 1 for anything else: a systemd restart may
    cure a port in use or a key file created since, never a wrong config file."""
    return Exit.CONFIG if isinstance(exc, ConfigError) else Exit.FAILED


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    collector.tune()
    try:
        logs = logsetup.from_arguments(PROGRAM, args)
        path = args.config if args.config is not None else paths.default_config(CONFIG_FILE)
        config = load_config(ServerConfig, path)
        server = Server(config)
    except PushJobsError as exc:
        hint = ""
        if isinstance(exc, KeyFileError) and "no such key file" in str(exc):
            hint = " (create it with: pushjobs key gen server --kind server)"
        sys.stderr.write(f"{PROGRAM}: error: {exc}{hint}\n")
        raise SystemExit(int(exit_code(exc))) from None
    log.info("%s %s started (config: %s)", PROGRAM, __version__, path or "built-in defaults")

    def stop(signum: int, frame: object) -> None:
        server.stop()

    def hup(signum: int, frame: object) -> None:
        log.info("SIGHUP: %s", logs.reopen())

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hup)
    code = Exit.OK
    try:
        server.run()
    except LogError as exc:
        log.error("the ordered log failed: %s; stopping (restart recovers from the log)", exc)
        code = Exit.FAILED
    finally:
        server.close()
    log.info("stopped")
    raise SystemExit(int(code))


if __name__ == "__main__":
    main()
