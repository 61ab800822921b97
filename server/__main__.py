"""``pushjobs-server`` (``python -m server``): arguments, logging, signals, exit codes.

Exit codes (the CLI's table, ``pushjobs.cli.exitcodes``): 0 stopped on SIGTERM/SIGINT;
1 the ordered log failed for good (corrupt, not a pushjobs log) or another start-up error;
2 bad arguments; 9 the configuration is wrong (a file or a value). A log that cannot be
written (a full disk, a read-only directory, an unreachable broker) is no exit: the
server says so in one line and tries again until it can.
SIGHUP reopens the log file (``--log-file``, for logrotate); the registry needs no
reload, it is re-read when it changes.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pushjobs import __version__, collector, logsetup, paths
from pushjobs.cli.exitcodes import Exit
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, KeyFileError, LogError, PushJobsError
from pushjobs.log.retry import Outage, retryable
from server.serverd import Server
from server.shell.serverconfig import CONFIG_FILE, ServerConfig

log = logging.getLogger("pushjobs.server")
PROGRAM = "pushjobs-server"
STOP_CHECK_S = 0.25  # a SIGTERM while waiting for the log is noticed this fast


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


def _fail(exc: PushJobsError) -> NoReturn:
    """One line on stderr and the exit code: never a traceback."""
    hint = ""
    if isinstance(exc, KeyFileError) and "no such key file" in str(exc):
        hint = " (create it with: pushjobs key gen server --kind server)"
    sys.stderr.write(f"{PROGRAM}: error: {exc}{hint}\n")
    raise SystemExit(int(exit_code(exc))) from None


def _start(config: ServerConfig, stopping: threading.Event) -> Server | None:
    """The server, once its ordered log can be written; None if stopped while waiting.

    A log that cannot be written (full, read-only, unreachable) is waited for, not exited
    on: under systemd an exit is a restart that meets the same log, forever.
    """
    outage = Outage()
    while True:
        try:
            server = Server(config)
        except LogError as exc:
            if not retryable(exc):
                _fail(exc)
            retry_at, line = outage.failed(exc, time.monotonic())
            if line is not None:
                log.error("%s", line)
            # Slices, not Event.wait: set() from a signal handler could deadlock on the
            # lock wait() holds in this same thread.
            while (wait_s := retry_at - time.monotonic()) > 0:
                if stopping.is_set():
                    return None
                time.sleep(min(wait_s, STOP_CHECK_S))
            if stopping.is_set():
                return None
            continue
        except PushJobsError as exc:
            _fail(exc)
        line = outage.recovered(time.monotonic())
        if line is not None:
            log.info("%s", line)
        return server


def _close(server: Server) -> None:
    try:
        server.close()
    except LogError as exc:
        # Leaving the leader group is a write too; the lease lapses on its own anyway.
        log.error("could not leave the leader group cleanly: %s", exc)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    collector.tune()
    try:
        logs = logsetup.from_arguments(PROGRAM, args)
        path = args.config if args.config is not None else paths.default_config(CONFIG_FILE)
        config = load_config(ServerConfig, path)
    except PushJobsError as exc:
        _fail(exc)
    stopping = threading.Event()
    running: list[Server] = []

    def stop(signum: int, frame: object) -> None:
        stopping.set()
        for server in running:
            server.stop()

    def hup(signum: int, frame: object) -> None:
        log.info("SIGHUP: %s", logs.reopen())

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hup)
    server = _start(config, stopping)
    if server is None:
        log.info("stopped before the ordered log could be written")
        raise SystemExit(int(Exit.OK))
    running.append(server)
    if stopping.is_set():
        server.stop()
    log.info("%s %s started (config: %s)", PROGRAM, __version__, path or "built-in defaults")
    code = Exit.OK
    try:
        server.run()
    except LogError as exc:
        log.error("the ordered log failed: %s; stopping", exc)
        code = Exit.FAILED
    finally:
        _close(server)
    log.info("stopped")
    raise SystemExit(int(code))


if __name__ == "__main__":
    main()
