"""The simulator process (``pushjobs simulate run`` execs it): settings in, a simulated fleet out.

``pushjobs simulate run`` parses and checks its options, then replaces itself with
``python -m agent.simulator SETTINGS_JSON``: the same process (pid, stdin, stdout, signals)
now runs the fleet, and the ``pushjobs`` toolkit never imports the agent package.

Exit codes: 0 stopped (SIGTERM/SIGINT or ``duration_s``); 2 impossible rates; a bad key
file gets the exit code the ``pushjobs`` CLI gives that error.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from agent.simulator.simfleet import Simulator
from agent.simulator.simnode import Behaviour
from agent.simulator.simsettings import SimSettings
from keys import files
from pushjobs import collector
from pushjobs.cli.exitcodes import Exit, for_error
from pushjobs.errors import PushJobsError


def settings_from(raw: dict[str, Any]) -> SimSettings:
    """``SimSettings`` from the CLI's JSON; ``ValueError`` naming what is impossible."""
    behaviour = Behaviour(**raw.pop("behaviour"))
    problems = behaviour.problems()
    if problems:
        raise ValueError("; ".join(problems))
    server = files.load_public(Path(raw.pop("server_key")))
    raw["servers"] = tuple(raw.get("servers", ()))
    return SimSettings(server=server, behaviour=behaviour, **raw)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    raw = orjson.loads(args[0])
    verbose = bool(raw.pop("verbose", False))
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s pushjobs-simulate: %(message)s",
        stream=sys.stderr,
    )
    try:
        settings = settings_from(raw)
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(int(Exit.USAGE)) from None
    except PushJobsError as exc:  # the key file: the exit code the CLI gives the same error
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(int(for_error(exc))) from None
    collector.tune()  # 25,000 nodes per process: the same long-lived heap as a server's
    sim = Simulator(settings)

    def stop(signum: int, frame: object) -> None:
        sim.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        sim.run(stdin_fd=None if sys.stdin.isatty() else sys.stdin.fileno())
    finally:
        sim.close()


if __name__ == "__main__":
    main()
