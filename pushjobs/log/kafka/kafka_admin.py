"""Topic and group administration for the Kafka log, with fallbacks for clusters that refuse.

``create`` asks the cluster for a single-partition topic with the policy's
``cleanup.policy``, ``retention.ms`` and ``retention.bytes`` (and a ``max.message.bytes``
that admits the log's largest record), bounded by the admin timeout.
A cluster that answers "unsupported" or not at all (librdkafka's mock cluster) still gets
the topic, from the caller's fallback hook or by auto-creation, and a warning says the
policy is not enforced there. A real refusal (bad config, no permission) is raised.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson

from pushjobs.errors import LogError
from pushjobs.log.base import TopicPolicy
from pushjobs.log.kafka.kafka_client import KafkaTimeouts, error_name, translate_exception
from pushjobs.log.kafka.kafka_io import Reader

log = logging.getLogger(__name__)

# Answers that mean "this cluster will not do it for us"; anything else is a real refusal.
_UNSUPPORTED = frozenset(
    {"_UNSUPPORTED_FEATURE", "UNSUPPORTED_VERSION", "_TIMED_OUT", "REQUEST_TIMED_OUT"}
)


class TopicAdmin:
    def __init__(
        self,
        ck: ModuleType,
        admin_mod: ModuleType,
        settings: Callable[[str, dict[str, Any]], dict[str, Any]],
        timeouts: KafkaTimeouts,
        reader: Reader,
        *,
        replication_factor: int,
        max_message_bytes: int,
        create_fallback: Callable[[str], None] | None,
    ) -> None:
        self._ck = ck
        self._admin_mod = admin_mod
        self._settings = settings
        self._timeouts = timeouts
        self._reader = reader
        self._replication_factor = replication_factor
        self._max_message_bytes = max_message_bytes
        self._create_fallback = create_fallback
        self._client: Any = None

    def create(self, topic: str, policy: TopicPolicy) -> None:
        """Make sure the topic exists, with the policy if the cluster lets us set it.

        Its ``max.message.bytes`` admits the largest record the log accepts: a broker's
        default (1 MiB and 12 bytes, for a whole batch) refused a value of exactly
        ``max_value_bytes`` (1 MiB) that the log had accepted.
        """
        configs = {**topic_config(policy), "max.message.bytes": str(self._max_message_bytes)}
        new_topic = self._admin_mod.NewTopic(
            topic,
            num_partitions=1,
            replication_factor=self._replication_factor,
            config=configs,
        )
        timeout_s = self._timeouts.admin_s
        try:
            futures = self._admin().create_topics(
                [new_topic], request_timeout=timeout_s, operation_timeout=timeout_s
            )
            futures[topic].result(timeout=timeout_s + 1)
            log.info("created topic %s with %s", topic, configs)
            self._reader.await_created(topic, timeout_s)
            return
        except self._ck.KafkaException as exc:
            name = error_name(exc.args[0] if exc.args else None)
            if name == "TOPIC_ALREADY_EXISTS":  # maybe only just, by another process
                self._reader.await_created(topic, timeout_s)
                return
            if name not in _UNSUPPORTED:
                raise translate_exception(exc, f"creating topic {topic}") from exc
            reason = str(exc.args[0].str())
        except concurrent.futures.TimeoutError:
            reason = f"no answer within {timeout_s} s"
        log.warning(
            "topic %s: the cluster would not create it (%s); its policy %s cannot be set "
            "there and is recorded but not enforced",
            topic,
            reason,
            configs,
        )
        if self._reader.exists(topic):
            return
        if self._create_fallback is not None:
            self._create_fallback(topic)
        else:
            self._auto_create(topic)
        self._reader.require_topic(topic)

    def set_group_session_timeout(self, group: str, session_timeout_s: float) -> None:
        """Best effort: KIP-848 groups take their session timeout from the broker.

        Kafka 4 lets a group override the broker default; clusters without group configs
        (Kafka 3, librdkafka's mock) keep their own value, which is logged. The group's
        heartbeat interval is set with it (``group_heartbeat_ms``): Kafka refuses a
        session that is not longer than the interval, 5 s by default, and a member learns
        of a new assignment only at its next heartbeat.
        """
        mod = self._admin_mod
        session_ms = round(session_timeout_s * 1000)
        settings = {
            "consumer.session.timeout.ms": session_ms,
            "consumer.heartbeat.interval.ms": group_heartbeat_ms(session_ms),
        }
        resource = mod.ConfigResource(
            mod.ResourceType.GROUP,
            group,
            incremental_configs=[
                mod.ConfigEntry(name, str(value), incremental_operation=mod.AlterConfigOpType.SET)
                for name, value in settings.items()
            ],
        )
        try:
            futures = self._admin().incremental_alter_configs(
                [resource], request_timeout=self._timeouts.admin_s
            )
            for future in futures.values():
                future.result(timeout=self._timeouts.admin_s + 1)
        except (self._ck.KafkaException, concurrent.futures.TimeoutError) as exc:
            log.info(
                "group %s: session timeout %.1f s not set at the broker (%s); the broker's "
                "group.consumer.session.timeout.ms and group.consumer.heartbeat.interval.ms "
                "apply",
                group,
                session_timeout_s,
                exc,
            )

    def _admin(self) -> Any:
        if self._client is None:
            self._client = self._admin_mod.AdminClient(self._settings("admin", {}))
        return self._client

    def _auto_create(self, topic: str) -> None:
        # A metadata request from a client allowed to auto-create makes the broker create
        # the topic with its defaults, including its partition count: we use only 0.
        creator = self._ck.Producer(self._settings("creator", {"allow.auto.create.topics": True}))
        try:
            creator.list_topics(topic, timeout=self._timeouts.request_s)
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, f"auto-creating topic {topic}") from exc
        finally:
            creator.flush(0)


def group_heartbeat_ms(session_ms: int) -> int:
    """The heartbeat interval of a KIP-848 group with that session: a fifth of it, so a
    member misses four before it expires, and learns of a takeover within a fifth."""
    return max(1, session_ms // 5)


def topic_config(policy: TopicPolicy) -> dict[str, str]:
    """Kafka topic configs for a policy; -1 means keep forever, as None does in ours."""
    retained = policy.retention_ms is not None or policy.retention_bytes is not None
    cleanup = ("compact,delete" if retained else "compact") if policy.compacted else "delete"
    return {
        "cleanup.policy": cleanup,
        "retention.ms": str(policy.retention_ms if policy.retention_ms is not None else -1),
        "retention.bytes": str(
            policy.retention_bytes if policy.retention_bytes is not None else -1
        ),
    }


def encode_policy(policy: TopicPolicy) -> bytes:
    return orjson.dumps(
        {
            "compacted": policy.compacted,
            "retention_ms": policy.retention_ms,
            "retention_bytes": policy.retention_bytes,
        }
    )


def decode_policy(raw: bytes) -> TopicPolicy:
    try:
        fields = orjson.loads(raw)
        return TopicPolicy(
            compacted=bool(fields["compacted"]),
            retention_ms=fields["retention_ms"],
            retention_bytes=fields["retention_bytes"],
        )
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise LogError(f"unreadable topic policy record: {raw!r}") from exc
