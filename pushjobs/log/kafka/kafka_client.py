"""The seam between the Kafka log and confluent-kafka: lazy import, configuration, errors.

confluent-kafka is an optional extra, so nothing here imports it at module level: ``load()``
imports it when a ``KafkaLog`` is built and says which extra to install when it is
missing. Its exceptions (``KafkaException`` wrapping a ``KafkaError``) become our own in
``translate()``; the Kafka backend modules call it at every boundary and nowhere else in
pushjobs sees a confluent-kafka type. confluent-kafka ships no type information, so the
handles it returns are ``Any`` here and are narrowed to our types where they are read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pushjobs.errors import (
    BackendUnavailable,
    FencedError,
    LogError,
    MissingExtra,
    OffsetOutOfRange,
    RecordTooLarge,
    UnknownTopic,
)

ConfigValue = str | int | float | bool
Config = Mapping[str, ConfigValue]

RDKAFKA_LOGGER = logging.getLogger("pushjobs.log.kafka.kafka_log.rdkafka")


@dataclass(frozen=True, slots=True)
class KafkaTimeouts:
    """Upper bounds, in seconds, on every call that waits for the cluster."""

    request_s: float = 10.0
    """Metadata, watermarks, offset fetch/commit, and each stall while reading a topic."""
    delivery_s: float = 10.0
    """One append or batch, from produce to the delivery report (message.timeout.ms)."""
    admin_s: float = 5.0
    """Admin requests (CreateTopics, AlterConfigs), which some clusters never answer."""


# What the log's semantics rest on, for consumers and producers.
CONSUMER_GUARANTEES: Config = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_uncommitted",
    "enable.partition.eof": False,
}


def producer_guarantees(delivery_ms: int) -> Config:
    return {
        "enable.idempotence": True,
        "acks": "all",
        # The delivery timeout: librdkafka reports every record, delivered or failed,
        # within it, so a flush bounded slightly longer always ends.
        "message.timeout.ms": delivery_ms,
        # An append to a missing topic must fail, not create it.
        "allow.auto.create.topics": False,
    }


def load() -> tuple[ModuleType, ModuleType]:
    """Import confluent-kafka and its admin module, or say which extra provides them."""
    try:
        import confluent_kafka
        import confluent_kafka.admin
    except ImportError as exc:
        raise MissingExtra("confluent-kafka", "kafka") from exc
    return confluent_kafka, confluent_kafka.admin


def client_config(
    bootstrap_servers: str, client_id: str, *extra: Config | None
) -> dict[str, ConfigValue | logging.Logger]:
    """The settings every client shares; later mappings override earlier ones."""
    conf: dict[str, ConfigValue | logging.Logger] = {
        "bootstrap.servers": bootstrap_servers,
        "client.id": client_id,
        # librdkafka writes to stderr unless given a logger; route it through logging.
        "logger": RDKAFKA_LOGGER,
    }
    for mapping in extra:
        if mapping:
            conf.update(mapping)
    return conf


_UNKNOWN_TOPIC = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"})
_TOO_LARGE = frozenset(
    {"MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_MSG_SIZE"}
)
_OUT_OF_RANGE = frozenset({"OFFSET_OUT_OF_RANGE", "_OFFSET_OUT_OF_RANGE"})
# The coordinator no longer counts the caller as a member of the group (or of its current
# generation): whatever the caller believed about its ownership is stale.
_FENCED = frozenset(
    {
        "UNKNOWN_MEMBER_ID",
        "ILLEGAL_GENERATION",
        "STALE_MEMBER_EPOCH",
        "FENCED_MEMBER_EPOCH",
        "FENCED_INSTANCE_ID",
        "_FENCED",
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
    }
)


def error_name(err: Any) -> str:
    return str(err.name()) if err is not None else "UNKNOWN"


def translate(err: Any, what: str) -> LogError:
    """Our error for a ``KafkaError`` met while doing ``what``; raise it ``from`` the cause."""
    name = error_name(err)
    detail = f"{what}: {err.str() if err is not None else 'unknown error'} ({name})"
    if name in _UNKNOWN_TOPIC:
        return UnknownTopic(detail)
    if name in _TOO_LARGE:
        return RecordTooLarge(detail)
    if name in _OUT_OF_RANGE:
        return OffsetOutOfRange(detail)
    if name in _FENCED:
        return FencedError(detail)
    return BackendUnavailable(detail)


def translate_exception(exc: BaseException, what: str) -> LogError:
    """Our error for a ``KafkaException`` (whose first argument is the ``KafkaError``)."""
    err = exc.args[0] if exc.args and hasattr(exc.args[0], "name") else None
    if err is None:
        return BackendUnavailable(f"{what}: {exc}")
    return translate(err, what)
