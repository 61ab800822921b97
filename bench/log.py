"""Benchmark of the ordered log: SQLite beside raw write+fsync on the same disk, and the
backends side by side (SQLite, librdkafka's mock cluster, a real Kafka broker), same run.

    python bench/log.py [--quick] [--dir DIR] [--backends sqlite,mock,kafka,kafka3]

Backends: a durable append's latency (one at a time: median, 99th percentile) and the
throughput of appends one at a time and in batches of 100, on SQLite (fsync on commit),
on librdkafka's mock cluster (in memory, in a process of its own) and on Apache Kafka
(``pushjobs.testbed.kafkabroker``: one broker, and three with replication factor 3 and
``min.insync.replicas`` 2: ``acks=all`` waits for two). The brokers run on this machine,
so their figures include their JVMs' share of its cores; a backend that cannot run here
(no Java or jars, no confluent-kafka) is reported as skipped, saying why. Kafka
acknowledges an append once every in-sync replica has it in its page cache, without an
fsync (``log.flush.*`` are off by default): its durability is the replicas', where
SQLite's is the disk's.

Durable appends, one at a time and batched, are set against the floor any durable log
pays: writing the same bytes and calling fsync, in a file in the same directory (ratio
ours/raw in time per record: 1.00 means no overhead over the fsync itself). Then, for
growing logs (100k, 300k, 1M records over 10k keys; --quick: 10k and 50k over 1k keys):
load rate, read throughput, ``latest``, a Python fold over a full read for comparison,
compaction time and file size, so it shows how each one grows.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from machine import describe  # bench/ is sys.path[0] when run as a script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # the mock cluster's host (tests/log), from a source checkout

from pushjobs.log.base import OrderedLog, TopicPolicy  # noqa: E402
from pushjobs.log.fold import fold  # noqa: E402
from pushjobs.log.sqlite.sqlite_log import SqliteLog  # noqa: E402

VALUE_BYTES = 200
LOAD_BATCH = 10_000


def disk_of(path: Path) -> str:
    """Device, filesystem type and free space of the filesystem holding ``path``."""
    best = ("?", "?", "")
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                device, mount, fstype, *_ = line.split()
                inside = str(path).startswith(mount.rstrip("/") + "/") or str(path) == mount
                if inside and len(mount) > len(best[2]):
                    best = (device, fstype, mount)
    except OSError:
        pass
    stat = os.statvfs(path)
    free_gib = stat.f_bavail * stat.f_frsize / 2**30
    return f"{best[0]} ({best[1]}, mounted at {best[2] or '?'}), {free_gib:.0f} GiB free"


def best_rate(run: Callable[[], int], rounds: int) -> float:
    """Records/s of the best of ``rounds`` runs (the one least disturbed by the machine)."""
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        count = run()
        best = max(best, count / (time.perf_counter() - start))
    return best


def raw_fsync(path: Path, records: int, batch: int) -> int:
    """Append ``records`` values to a file, one write + fsync per ``batch`` of them."""
    chunk = os.urandom(VALUE_BYTES + 16) * batch  # value + key and offset, roughly
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(records // batch):
            os.write(fd, chunk)
            os.fsync(fd)
    finally:
        os.close(fd)
    return records // batch * batch


def log_appends(log: SqliteLog, topic: str, records: int, batch: int) -> int:
    value = os.urandom(VALUE_BYTES)
    if batch == 1:
        for i in range(records):
            log.append(topic, f"job:{i % 1000}", value)
        return records
    rows = [(f"job:{i % 1000}", value) for i in range(batch)]
    for _ in range(records // batch):
        log.append_batch(topic, rows)
    return records // batch * batch


def durability(workdir: Path, quick: bool) -> None:
    print("\n== durable appends (synchronous=FULL) vs raw write+fsync, same directory")
    print(f"{'case':<22}{'ours rec/s':>14}{'raw rec/s':>14}{'ours/raw time':>16}")
    log = SqliteLog(workdir / "appends.db")
    log.create_topic("events", TopicPolicy())
    rounds = 3
    cases = [(1, 300 if quick else 2000), (100, 5_000 if quick else 50_000)]
    cases.append((1000, 20_000 if quick else 200_000))
    try:
        for batch, records in cases:
            raw_path = workdir / f"raw-{batch}.bin"
            ours = best_rate(lambda b=batch, n=records: log_appends(log, "events", n, b), rounds)
            raw = best_rate(lambda b=batch, n=records, p=raw_path: raw_fsync(p, n, b), rounds)
            name = "one at a time" if batch == 1 else f"batches of {batch}"
            print(f"{name:<22}{ours:>14,.0f}{raw:>14,.0f}{raw / ours:>16.2f}")
    finally:
        log.close()


@contextlib.contextmanager
def backend_log(name: str, workdir: Path) -> Iterator[OrderedLog]:
    """An empty log on backend ``name``; raises ``RuntimeError`` saying why it cannot run."""
    if name == "sqlite":
        log: OrderedLog = SqliteLog(workdir / "backends.db")
        try:
            yield log
        finally:
            log.close()
        return
    try:
        from pushjobs.log.kafka.kafka_log import KafkaLog
    except ImportError as exc:
        raise RuntimeError(f"confluent-kafka is not installed: {exc}") from exc
    if name == "mock":
        from tests.log.kafka_support import MockClusterHost, available

        reason = available()
        if reason is not None:
            raise RuntimeError(reason)
        host = MockClusterHost()
        try:
            cluster = host.new_cluster()
            log = cluster.open_log()
            try:
                yield log
            finally:
                log.close()
        finally:
            host.close()
        return
    from pushjobs.testbed import kafkabroker

    reason = kafkabroker.unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    nodes = 3 if name == "kafka3" else 1
    with kafkabroker.KafkaCluster(workdir / f"kafka-{nodes}", nodes=nodes) as brokers:
        log = KafkaLog(brokers.bootstrap, client_id="bench")
        try:
            yield log
        finally:
            log.close()


def backend_figures(log: OrderedLog, quick: bool) -> dict[str, float]:
    """Append latency (ms: median, p99) and throughput (records/s: single, batched)."""
    log.create_topic("events", TopicPolicy())
    value = os.urandom(VALUE_BYTES)
    for i in range(20):  # warm: connections, metadata, the producer id
        log.append("events", f"warm:{i}", value)
    singles = 200 if quick else 1000
    took = []
    for i in range(singles):
        start = time.perf_counter()
        log.append("events", f"job:{i % 1000}", value)
        took.append(time.perf_counter() - start)
    took.sort()
    batches = 20 if quick else 100
    rows = [(f"job:{i}", value) for i in range(100)]
    start = time.perf_counter()
    for _ in range(batches):
        log.append_batch("events", rows)
    batched_s = time.perf_counter() - start
    return {
        "p50_ms": statistics.median(took) * 1000,
        "p99_ms": took[min(len(took) - 1, int(len(took) * 0.99))] * 1000,
        "single_rps": singles / sum(took),
        "batch_rps": batches * 100 / batched_s,
    }


def backends(workdir: Path, names: list[str], quick: bool) -> None:
    # The mock refuses the admin API and a new broker loads its coordinators: warnings the
    # log rightly gives a server's operator, noise between a benchmark's figures.
    logging.getLogger("pushjobs").setLevel(logging.ERROR)
    print("\n== durable appends per backend (200-byte values, one partition)")
    print(
        f"{'backend':<34}{'p50 ms':>9}{'p99 ms':>9}{'1-at-a-time rec/s':>19}{'batch-100 rec/s':>17}"
    )
    labels = {
        "sqlite": "SQLite (fsync on commit)",
        "mock": "librdkafka mock cluster",
        "kafka": "Kafka 1 broker",
        "kafka3": "Kafka 3 brokers (RF 3, ISR>=2)",
    }
    for name in names:
        label = labels.get(name, name)
        try:
            with backend_log(name, workdir) as log:
                f = backend_figures(log, quick)
        except RuntimeError as exc:
            print(f"{label:<34}skipped: {exc}")
            continue
        print(
            f"{label:<34}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}{f['single_rps']:>19,.0f}"
            f"{f['batch_rps']:>17,.0f}",
            flush=True,
        )


def build(path: Path, records: int, keys: int) -> float:
    """A compacted topic of ``records`` over ``keys`` keys; return the load rate."""
    value = os.urandom(VALUE_BYTES)
    log = SqliteLog(path)
    try:
        log.create_topic("assignments", TopicPolicy(compacted=True))
        start = time.perf_counter()
        done = 0
        while done < records:
            n = min(LOAD_BATCH, records - done)
            log.append_batch("assignments", [(f"job:{(done + i) % keys}", value) for i in range(n)])
            done += n
        return records / (time.perf_counter() - start)
    finally:
        log.close()


def used_bytes(path: Path) -> int:
    """Bytes in pages that hold data: the file does not shrink after compaction."""
    db = sqlite3.connect(path)
    try:
        (used,) = db.execute(
            "SELECT (page_count - freelist_count) * page_size"
            " FROM pragma_page_count, pragma_freelist_count, pragma_page_size"
        ).fetchone()
    finally:
        db.close()
    return int(used)


def growth(workdir: Path, quick: bool) -> None:
    sizes, keys = ((10_000, 50_000), 1_000) if quick else ((100_000, 300_000, 1_000_000), 10_000)
    print(f"\n== growth: a compacted topic over {keys:,} keys, {VALUE_BYTES}-byte values")
    print(
        f"{'records':>10}{'load rec/s':>12}{'read rec/s':>12}{'latest s':>10}"
        f"{'fold(read) s':>14}{'compact s':>11}{'after':>8}{'file MiB':>10}{'compacted MiB':>15}"
    )
    for records in sizes:
        path = workdir / f"growth-{records}.db"
        load = build(path, records, keys)
        log = SqliteLog(path)
        try:
            start = time.perf_counter()
            offset = 0
            everything = []
            while batch := log.read("assignments", offset, limit=10_000):
                everything.extend(batch)
                offset = batch[-1].offset + 1
            read_s = time.perf_counter() - start
            folded = fold(everything)
            fold_s = time.perf_counter() - start
            del everything
            start = time.perf_counter()
            latest = log.latest("assignments")
            latest_s = time.perf_counter() - start
            assert latest.keys() == folded.keys()
            size_mib = path.stat().st_size / 2**20
            (stats,) = log.compact(["assignments"])
            used = used_bytes(path)
        finally:
            log.close()
        print(
            f"{records:>10,}{load:>12,.0f}{records / read_s:>12,.0f}{latest_s:>10.3f}"
            f"{fold_s:>14.2f}{stats.seconds:>11.2f}{stats.records_after:>8,}"
            f"{size_mib:>10.1f}{used / 2**20:>15.1f}"
        )
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few seconds")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--backends", default="sqlite,mock,kafka,kafka3", help="the side-by-side section"
    )
    parser.add_argument("--only-backends", action="store_true", help="that section alone")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="pushjobs-bench-", dir=args.dir))
    print(describe())
    print(f"disk: {disk_of(workdir)}")
    print(f"SQLite {sqlite3.sqlite_version}; work dir {workdir}")
    started = time.perf_counter()
    try:
        backends(workdir, [n for n in args.backends.split(",") if n], args.quick)
        if not args.only_backends:
            durability(workdir, args.quick)
            growth(workdir, args.quick)
    finally:
        shutil.rmtree(workdir)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
