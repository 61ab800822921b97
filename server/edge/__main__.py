"""``python -m server.edge``: an edge, as its leader starts it (its spec on stdin).

Not a command for operators: ``pushjobs-server`` starts its edges (``[server] edges``)
and restarts one that dies. Exit codes: 0 stopped (SIGTERM, its leader gone), 1 failed.
"""

from __future__ import annotations

import logging
import signal
import sys

from pushjobs import collector
from pushjobs.errors import PushJobsError
from server.edge.edged import Edge, EdgeSpec

log = logging.getLogger("pushjobs.edge")


def main() -> None:
    collector.tune()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        spec = EdgeSpec.parse(sys.stdin.buffer.read())
        edge = Edge(spec)
    except (PushJobsError, ValueError, TypeError, OSError) as exc:
        sys.stderr.write(f"pushjobs-edge: error: {exc}\n")
        raise SystemExit(1) from None

    def stop(signum: int, frame: object) -> None:
        edge.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # the leader's Ctrl-C stops the leader, which stops us
    try:
        edge.run()
    finally:
        edge.close()
    raise SystemExit(0)


if __name__ == "__main__":
    main()
