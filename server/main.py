"""``pushjobs-server`` (``python -m server.main``): arguments, logging, signals, exit codes.

Exit codes: 0 stopped on SIGTERM/SIGINT; 1 the ordered log failed (a restart recovers from
the log) or another start-up error; 2 the configuration is wrong.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from pushjobs import collector
from pushjobs.config import load_config
from pushjobs.errors import ConfigError, KeyFileError, LogError, PushJobsError
from server.daemon import Server
from server.settings import ServerConfig

log = logging.getLogger("pushjobs.server")


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pushjobs-server",
        description="The pushjobs server: node liveness, job coordination, the API.",
        epilog="Example: pushjobs-server --config /etc/pushjobs/server.toml",
    )
    parser.add_argument("--config", type=Path, help="server TOML file (default: built-in defaults)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s pushjobs-server: %(message)s",
        stream=sys.stderr,
    )
    collector.tune()
    try:
        config = load_config(ServerConfig, args.config)
        server = Server(config)
    except PushJobsError as exc:
        hint = ""
        if isinstance(exc, KeyFileError) and "no such key file" in str(exc):
            hint = " (create it with: pushjobs key gen server --kind server)"
        sys.stderr.write(f"pushjobs-server: error: {exc}{hint}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None

    def stop(signum: int, frame: object) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    try:
        server.run()
    except LogError as exc:
        log.error("the ordered log failed: %s; stopping (restart recovers from the log)", exc)
        code = 1
    finally:
        server.close()
    log.info("stopped")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
