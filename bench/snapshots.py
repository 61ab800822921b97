"""What persisting a big job costs: snapshot records and events for one reply phase.

One job of K nodes (default 40,000) gets an ``ack_commit`` from every node in random
order, flushed every B replies (default 100 and 1,000: a busy server's loop turns), the
way the daemon flushes a turn: the header and the touched chunks to ``assignments``, one
event per change to ``events``, into a real SQLite log in a temporary directory.

Printed per chunk size: the time of the whole phase, the bytes of snapshot records and
their count. The baseline in the same run is chunks of 500 nodes, the size before they
shrank to ``server.core.snapshot.CHUNK_NODES`` (rows are cached in both; before that too was added,
500-node chunks cost more still).

    python bench/snapshots.py [--nodes 40000] [--flush 100,1000] [--chunks 500,100,25]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.log.base import TopicPolicy
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from pushjobs.protocol.messages import AckCommit
from pushjobs.quorum import Quorum
from server.core import records
from server.core.coordinator import Change, Coordinator
from server.core.snapshot import CHUNK_NODES

T0 = 1_700_000_000_000


def phase(nodes: int, flush: int, chunk_nodes: int, directory: Path) -> dict[str, float]:
    names = [f"sim-{i:05d}" for i in range(nodes)]
    coordinator = Coordinator()
    coordinator.submit(
        "j1",
        "true",
        names,
        names,
        T0,
        quorum=Quorum(),
        vote_timeout_ms=60_000,
        run_timeout_ms=60_000,
        options={},
        requested_by="bench",
    )
    coordinator.jobs["j1"].chunk_nodes = chunk_nodes
    log = SqliteLog(directory / f"log-{flush}-{chunk_nodes}.db")
    log.create_topic("assignments", TopicPolicy(compacted=True))
    log.create_topic("events", TopicPolicy())
    order = names[:]
    random.Random(7).shuffle(order)
    written = count = 0
    started = time.perf_counter()
    for i in range(0, nodes, flush):
        changes: list[Change] = []
        for name in order[i : i + flush]:
            reply = AckCommit(sender=name, incarnation="i", sequence=1, timestamp=T0, job_id="j1")
            changes += coordinator.reply(reply, T0 + 1)
        snapshots = [
            record
            for job_id, chunks in records.touched_chunks(changes, coordinator.jobs).items()
            for record in records.snapshot_records(
                coordinator.jobs[job_id], coordinator.versions[job_id], chunks
            )
        ]
        log.append_batch("assignments", snapshots)
        log.append_batch("events", records.job_events(changes, coordinator.jobs, "bench"))
        written += sum(len(value) for _, value in snapshots)
        count += len(snapshots)
    took = time.perf_counter() - started
    log.close()
    return {"seconds": took, "mb": written / 1e6, "records": count}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=40_000)
    parser.add_argument("--flush", default="100,1000", help="replies per flush")
    parser.add_argument("--chunks", default=f"500,100,{CHUNK_NODES}", help="nodes per chunk")
    args = parser.parse_args()
    print(describe())
    print(f"one reply phase of a {args.nodes}-node job; baseline: chunks of 500")
    print(f"{'flush':>6} {'chunk':>6} {'seconds':>8} {'MB':>8} {'records':>8} {'vs 500':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for flush in (int(f) for f in args.flush.split(",")):
            baseline = None
            for size in (int(c) for c in args.chunks.split(",")):
                r = phase(args.nodes, flush, size, Path(tmp))
                if size == 500:
                    baseline = r["seconds"]
                ratio = f"{baseline / r['seconds']:.1f}x" if baseline else "-"
                print(
                    f"{flush:>6} {size:>6} {r['seconds']:>8.2f} {r['mb']:>8.1f} "
                    f"{r['records']:>8.0f} {ratio:>7}"
                )


if __name__ == "__main__":
    main()
