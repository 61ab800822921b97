"""The fleet report on 1M and 10M synthetic events: Spark against one Python process.

For each size it generates a realistic history (``pushjobs.pipeline.demo``) in the
archive's Parquet layout, then computes the same report twice in this run:

- Spark (``spark_job``), local mode with the production settings (``[report]`` defaults:
  local[2], 4 shuffle partitions), timed from reading the Parquet to the collected tables
  (the session's start-up is reported separately, once);
- the single-process reference (``metrics.compute``) over the same Parquet read with
  pyarrow, batch by batch.

It prints both times, their ratio, how each grows from the smallest to the largest size,
and checks the two reports agree (same nodes, outcomes and latency percentiles).

    python bench/pipeline.py [--sizes 1000000,10000000] [--driver-memory 3g]
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.pipeline import demo, metrics, spark_job
from pushjobs.pipeline.session import spark_session
from pushjobs.pipeline.settings import ReportSettings

EVENTS_PER_JOB = 56  # targets 5..30, three events per node and four per job


def generate(size: int, out: Path) -> tuple[int, float]:
    started = time.monotonic()
    nodes, days = 500, 14.0
    jobs_per_day = max(1, round(size / EVENTS_PER_JOB / days))
    count = demo.write_parquet(
        demo.history(nodes=nodes, days=days, jobs_per_day=jobs_per_day, seed=size), out
    )
    return count, time.monotonic() - started


def single_process(location: Path) -> tuple[metrics.Report, float]:
    import pyarrow.dataset as ds

    started = time.monotonic()
    dataset = ds.dataset(str(location), format="parquet", partitioning="hive")

    def rows() -> Any:
        for batch in dataset.to_batches(batch_size=200_000):
            yield from batch.to_pylist()

    report = metrics.compute(rows())
    return report, time.monotonic() - started


def on_spark(spark: Any, location: Path) -> tuple[metrics.Report, float]:
    started = time.monotonic()
    report = spark_job.compute(spark_job.load(spark, str(location)))
    return report, time.monotonic() - started


def agree(a: metrics.Report, b: metrics.Report) -> str:
    if (a.events, a.skipped) != (b.events, b.skipped):
        return f"event counts differ: {a.events}/{a.skipped} vs {b.events}/{b.skipped}"
    if a.availability != b.availability:
        return "availability differs"
    if a.outcomes != b.outcomes or a.by_command != b.by_command:
        return "outcomes differ"
    for x, y in zip(a.latency, b.latency, strict=True):
        if (x["metric"], x["scope"], x["count"]) != (y["metric"], y["scope"], y["count"]):
            return f"latency rows differ at {x['scope']}"
        for q in ("p50", "p95", "p99"):
            if not math.isclose(x[q], y[q], rel_tol=1e-9, abs_tol=1e-6):
                return f"{x['metric']} {x['scope']} {q}: {x[q]} vs {y[q]}"
    if [s["node"] for s in a.stragglers] != [s["node"] for s in b.stragglers]:
        return "stragglers differ"
    return "identical"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--driver-memory", default="3g")
    args = parser.parse_args()
    print(describe())
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.monotonic()
    settings = ReportSettings(driver_memory=args.driver_memory)
    spark = spark_session(
        settings, log_file=Path(tempfile.gettempdir()) / "pushjobs-bench-spark.log"
    )
    spark.range(1).count()  # the JVM is up and has run one job
    startup = time.monotonic() - started
    print(
        f"Spark {spark.version} {settings.master}, {settings.shuffle_partitions} shuffle "
        f"partitions: session start-up {startup:.1f} s (not counted below)"
    )
    results = []
    try:
        for size in sizes:
            root = Path(tempfile.mkdtemp(prefix=f"pushjobs-pipeline-{size}-"))
            try:
                count, gen_s = generate(size, root)
                print(f"\n== {count} events ({gen_s:.1f} s to generate, {_du(root)} MiB Parquet)")
                s_report, s_took = on_spark(spark, root)
                print(f"  spark:          {s_took:7.2f} s")
                p_report, p_took = single_process(root)
                print(f"  single process: {p_took:7.2f} s   (pyarrow read + metrics.compute)")
                verdict = agree(s_report, p_report)
                print(f"  ratio single/spark {p_took / s_took:.2f}; reports {verdict}")
                results.append((count, s_took, p_took, verdict))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
    print(f"\n{'events':>10} {'spark s':>8} {'single s':>9} {'single/spark':>12}  reports")
    for count, s_took, p_took, verdict in results:
        print(f"{count:>10} {s_took:>8.2f} {p_took:>9.2f} {p_took / s_took:>12.2f}  {verdict}")
    if len(results) > 1:
        (c0, s0, p0, _), (c1, s1, p1, _) = results[0], results[-1]
        print(f"growth x{c1 / c0:.1f} events: spark x{s1 / s0:.2f}, single process x{p1 / p0:.2f}")


def _du(path: Path) -> str:
    return f"{sum(p.stat().st_size for p in path.rglob('*.parquet')) / 2**20:.0f}"


if __name__ == "__main__":
    main()
