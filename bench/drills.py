"""The long fault drills the suite leaves out: tests marked ``drill``, each the long form
of one the suite runs bounded (``setup.cfg`` runs the suite with ``-m "not drill"``).

    python bench/drills.py [--repeat 3] [-- pytest options]

Runs ``pytest -m drill`` (``--repeat`` times, stopping at the first failure) and prints
the machine, each run's outcome and wall time, and the drills' own durations. Today's
drills: every Kafka broker down 14 s and back, one broker's disk full mid-job, the broker
leading ``commands`` stopped past its session (tests/e2e/test_kafka_broker_faults.py;
needs Java and the Kafka jars), schedule partitions moving on a real broker, colliding
fires through a stopped standby and a killed leader, enrolment spam over many
connections, a second chaos seed, leaving a Kafka group in eight rounds (the suite:
three), and the report from rollups against the one from raw events over every window
of tests/pipeline/rolled_history.py (the suite: one, and a cluster's). Exits 1 if a run
failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from machine import describe  # bench/ is sys.path[0] when run as a script

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs, stopping at a failure")
    parser.add_argument("pytest_args", nargs="*", help="more pytest options, after --")
    args = parser.parse_args()
    print(describe())
    # One at a time (``-n 0``): a drill's faults are timed against its own processes.
    command = [sys.executable, "-m", "pytest", "-m", "drill", "-n", "0", "--durations=0"]
    command += args.pytest_args
    for run in range(1, args.repeat + 1):
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, check=False)
        took = time.monotonic() - started
        print(f"drill run {run}/{args.repeat}: exit {done.returncode} in {took:.0f} s", flush=True)
        if done.returncode != 0:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
