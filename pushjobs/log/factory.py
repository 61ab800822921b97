"""Open an ordered-log backend by name from ``LogSettings``.

``LogSettings`` is a config section (``load_config`` maps a ``[log]`` TOML table or
``PUSHJOBS_LOG__BACKEND=kafka`` onto it). The Kafka backend is imported only when asked
for, so the core install never needs confluent-kafka.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pushjobs import paths
from pushjobs.clock import Clock
from pushjobs.errors import ConfigError, MissingExtra
from pushjobs.log.base import DEFAULT_MAX_VALUE_BYTES, OrderedLog
from pushjobs.log.compaction import DEFAULT_DELETE_RETENTION_MS
from pushjobs.log.topics import DEFAULT_PREFIX

BACKENDS = ("sqlite", "kafka", "memory")


@dataclass(frozen=True, slots=True)
class LogSettings:
    backend: str = "sqlite"
    path: Path | None = None
    """The sqlite file; None: $PUSHJOBS_LOG, else <home>/log.db."""
    bootstrap_servers: str = "localhost:9092"
    topic_prefix: str = DEFAULT_PREFIX
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    busy_timeout_s: float = 10.0
    """sqlite: how long a write waits for another process's write lock."""
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    """sqlite, memory: how long compaction keeps a tombstone."""
    compact_every_appends: int = 0
    """sqlite, memory: compact a topic after this many appends to it (0: only on demand)."""
    client_id: str = "pushjobs"
    """kafka: the client id brokers log and quota by."""
    create: bool = True
    """sqlite: create the file if missing (the CLI's inspection commands say no)."""

    def check(self) -> Iterable[tuple[str, str]]:
        if self.backend not in BACKENDS:
            yield "backend", f"must be one of {', '.join(BACKENDS)}"
        if self.max_value_bytes < 1:
            yield "max_value_bytes", "must be at least 1"
        if self.busy_timeout_s < 0:
            yield "busy_timeout_s", "must not be negative"
        if self.delete_retention_ms < 0:
            yield "delete_retention_ms", "must not be negative"
        if self.compact_every_appends < 0:
            yield "compact_every_appends", "must not be negative (0 turns it off)"
        if self.backend == "kafka" and not self.bootstrap_servers.strip():
            yield "bootstrap_servers", "must name at least one broker"

    def sqlite_path(self) -> Path:
        return self.path if self.path is not None else paths.log_path()


def open_log(settings: LogSettings, *, clock: Clock | None = None) -> OrderedLog:
    """A new handle on the log ``settings`` describe."""
    for field, problem in settings.check():
        raise ConfigError(problem, key=f"log.{field}")
    if settings.backend == "memory":
        from pushjobs.log.memory import MemoryLog

        return MemoryLog(
            clock=clock,
            max_value_bytes=settings.max_value_bytes,
            delete_retention_ms=settings.delete_retention_ms,
            compact_every_appends=settings.compact_every_appends,
        )
    if settings.backend == "kafka":
        return _open_kafka(settings, clock)
    from pushjobs.log.sqlite.sqlite_log import SqliteLog

    return SqliteLog(
        settings.sqlite_path(),
        create=settings.create,
        clock=clock,
        max_value_bytes=settings.max_value_bytes,
        busy_timeout_s=settings.busy_timeout_s,
        delete_retention_ms=settings.delete_retention_ms,
        compact_every_appends=settings.compact_every_appends,
    )


def _open_kafka(settings: LogSettings, clock: Clock | None) -> OrderedLog:
    if importlib.util.find_spec("confluent_kafka") is None:
        raise MissingExtra("confluent-kafka", "kafka")
    try:
        from pushjobs.log.kafka.kafka_log import KafkaLog
    except ImportError as exc:
        raise MissingExtra("confluent-kafka", "kafka") from exc
    return KafkaLog(
        settings.bootstrap_servers,
        client_id=settings.client_id,
        clock=clock,
        max_value_bytes=settings.max_value_bytes,
    )
