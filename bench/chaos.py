"""Chaos for as long as you like: jobs while the server and agents are killed and paused.

    python bench/chaos.py --minutes 30 --agents 10 [--seed N]
    python bench/chaos.py --minutes 10 --agents 8 --kinds timeout --points vote \\
        --faults kill --victims node-5      # one suspect case, in a loop
    python bench/chaos.py --minutes 10 --agents 8 --kinds batch,scheduled

Kinds: short, long, fail, timeout, abort (points vote, run, finish, idle); batch (a job
over every node through a window smaller than the fleet; points first, between, end);
scheduled (a one-shot schedule; points before, fire, started). Each kind draws from the
points it has among ``--points``.

One real server and N real agents on 127.0.0.1; rounds of ``pushjobs/testbed/chaos.py`` (a job of
a random kind, one fault at a random point of its life, then the invariants) until the
time is up, then the end check (every node back and usable). Prints the machine, the
rounds, the faults injected, the job outcomes and every invariant violation (there must
be none); exits 1 if there was one. The seed is printed: the same seed replays the same
schedule of faults (the timing of real processes still varies). On a violation the
server's and agents' logs, the nodes' run records and the ordered log are kept
(``--keep``, a directory under the system's temporary one by default) and their place
printed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.testbed.chaos import FAULTS, KINDS, POINTS, POINTS_OF, Chaos, Narrow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quiet", action="store_true", help="no line per round")
    parser.add_argument("--kinds", type=_names(KINDS), default=KINDS, help=",".join(KINDS))
    parser.add_argument("--points", type=_names(POINTS), default=POINTS, help=",".join(POINTS))
    parser.add_argument("--faults", type=_names(FAULTS), default=FAULTS, help=",".join(FAULTS))
    parser.add_argument("--victims", type=_names(()), default=(), help="server,node-1,...")
    parser.add_argument("--keep", type=Path, default=None, help="where logs go on a violation")
    parser.add_argument(
        "--edges",
        type=int,
        default=0,
        help="the server's edge processes ([server] edges); each is a victim too (edge-0, ...)",
    )
    args = parser.parse_args()
    for kind in args.kinds:
        if not set(POINTS_OF[kind]) & set(args.points):
            parser.error(f"--points has none of {kind}'s: {', '.join(POINTS_OF[kind])}")
    narrow = Narrow(args.kinds, args.points, args.faults, args.victims)
    # A plain kill would skip the clean-up below and leave ten agents and a server behind.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print(describe())
    edges = f", {args.edges} edges" if args.edges else ""
    print(f"chaos: seed {seed}, {args.agents} agents{edges}, {args.minutes:g} minutes")
    started = time.monotonic()
    end = started + args.minutes * 60
    say = (lambda line: None) if args.quiet else (lambda line: print(_now(), line, flush=True))
    with (
        tempfile.TemporaryDirectory(prefix="pushjobs-chaos-") as tmp,
        Chaos(
            Path(tmp) / "fleet",
            seed=seed,
            agents=args.agents,
            say=say,
            narrow=narrow,
            edges=args.edges,
        ) as chaos,
    ):
        seen = 0
        while time.monotonic() < end:
            chaos.round()
            for line in chaos.report.violations[seen:]:
                print(f"  VIOLATION {line}", flush=True)
            seen = len(chaos.report.violations)
        chaos.finish()
        report = chaos.report
        if report.violations:
            keep = args.keep or Path(tempfile.gettempdir()) / f"pushjobs-chaos-{seed}"
            for sub in ("logs", "runs"):
                shutil.copytree(Path(tmp) / "fleet" / sub, keep / sub, dirs_exist_ok=True)
            # The ordered log (the server stopped: it is whole) and the key that checks it:
            # pushjobs audit verify --log KEEP/log.db --key KEEP/server.pub
            for name in ("log.db", "log.db-wal", "log.db-shm", "keys/server.pub"):
                if (Path(tmp) / "fleet" / name).exists():
                    shutil.copy2(Path(tmp) / "fleet" / name, keep / Path(name).name)
            print(f"logs, run records and the ordered log kept in {keep}")
    took = time.monotonic() - started
    print(f"\nrounds: {report.rounds} in {took / 60:.1f} min")
    print("faults injected:")
    for what, n in sorted(report.faults.items()):
        print(f"  {what:28} {n}")
    print("job outcomes:")
    for state, n in sorted(report.outcomes.items()):
        print(f"  {state:28} {n}")
    print(f"invariant violations: {len(report.violations)}")
    for line in report.violations:
        print(f"  {line}")
    raise SystemExit(1 if report.violations else 0)


def _now() -> str:
    """The wall time, to find a round in the logs."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}"


def _names(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of names, each one of ``allowed`` (any if it is empty)."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        wrong = [name for name in names if allowed and name not in allowed]
        if not names or wrong:
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed) or 'names'}")
        return names

    return parse


if __name__ == "__main__":
    main()
