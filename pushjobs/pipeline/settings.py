"""Pipeline configuration: ``[archive]``, ``[report]`` and the ``[log]`` it reads from.

Everything that differs between a laptop and a cluster is here, never in code: the Spark
master, the input location (a directory, or an object-store URL Spark can read), and any
Spark setting (``[report.spark]``, e.g. ``"spark.hadoop.fs.s3a.endpoint" = "..."``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pushjobs import paths
from pushjobs.log.factory import LogSettings
from pushjobs.pipeline.archive import DEFAULT_GROUP


@dataclass(frozen=True, slots=True)
class ArchiveSettings:
    directory: Path | None = None
    """Where Parquet goes (default: $PUSHJOBS_HOME/archive)."""
    group: str = DEFAULT_GROUP
    batch: int = 50_000
    rollups: bool = True
    """Keep per-day rollups beside the raw events (``pipeline/rollup.py``)."""

    def dir(self) -> Path:
        return self.directory if self.directory is not None else paths.home() / "archive"

    def check(self) -> Iterable[tuple[str, str]]:
        if self.batch < 1:
            yield "batch", "must be at least 1"
        if not self.group.strip():
            yield "group", "must not be empty"


@dataclass(frozen=True, slots=True)
class ReportSettings:
    master: str = "local[2]"
    input: str = ""
    """Archived events: a directory or URL (default: the archive directory)."""
    output: Path = Path("pushjobs-report")
    shuffle_partitions: int = 4
    """Small on purpose: the default of 200 made a 1M-event report 2.4x slower here."""
    driver_memory: str = "1g"
    straggler_factor: float = 2.0
    straggler_min_runs: int = 20
    """A node is judged slow at a command only from at least this many runs of it."""
    server_gap_s: float = 60.0
    """Silence longer than this, ended by a server announcing nodes again, is server
    downtime: unknown, not node uptime (see pushjobs/pipeline/uptime.py)."""
    spark: dict[str, str] = field(default_factory=dict)
    """Any other Spark setting, passed as is."""

    def check(self) -> Iterable[tuple[str, str]]:
        if self.shuffle_partitions < 1:
            yield "shuffle_partitions", "must be at least 1"
        if self.straggler_factor <= 0:
            yield "straggler_factor", "must be greater than 0"
        if self.straggler_min_runs < 1:
            yield "straggler_min_runs", "must be at least 1"
        if self.server_gap_s <= 0:
            yield "server_gap_s", "must be greater than 0"
        if not self.master.strip():
            yield "master", "must name a Spark master, e.g. local[2] or spark://host:7077"


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    archive: ArchiveSettings = field(default_factory=ArchiveSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    log: LogSettings = field(default_factory=LogSettings)
