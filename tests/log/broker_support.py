"""Kafka log handles for tests on a real broker (``tests/kafka_broker.py``), one namespace
per test.

The session shares one broker, while the conformance tests name their topics and groups
freely (``jobs``, ``leaders``...). So each test gets a ``BrokerLogs``: a namespace
(``t7-3fa2c1.``) that prefixes, on the cluster, every topic, group and the log's own
control topics (``internal_prefix``), and handles (``Namespaced``) that take and give
back the test's own names. Nothing a test creates is seen by another, and nothing is
deleted between tests: a name is never used twice.

    logs = BrokerLogs(cluster)             # per test
    log = logs.open_log(clock=...)         # a new handle (as many as you like)
    spec = logs.spec()                     # dict[str, str] for a subprocess, which calls
    log = open_log_from_spec(spec)         #   this to open its own handle
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pushjobs.clock import Clock
from pushjobs.log.base import (
    DEFAULT_MAX_VALUE_BYTES,
    Batch,
    CompactionStats,
    Fence,
    GroupMember,
    Record,
    TopicInfo,
    TopicPolicy,
)
from pushjobs.log.kafka.kafka_log import KafkaLog, KafkaTimeouts
from pushjobs.testbed.kafkabroker import KafkaCluster

# Short enough that a test against a dead cluster fails in seconds, long enough for a
# loaded CI machine (and for a real broker's first group coordinator lookup).
TEST_TIMEOUTS = KafkaTimeouts(request_s=10.0, delivery_s=10.0, admin_s=10.0)
_namespaces = itertools.count()


class Namespaced:
    """A ``KafkaLog`` under a namespace: names in are prefixed, names out are not."""

    def __init__(self, inner: KafkaLog, namespace: str) -> None:
        self.inner = inner
        self.ns = namespace

    def __repr__(self) -> str:
        return f"Namespaced({self.inner!r}, {self.ns!r})"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # Names.

    def _in(self, name: str) -> str:
        return self.ns + name

    def _out(self, name: str) -> str:
        return name.removeprefix(self.ns)

    def _fence_in(self, fence: Fence | None) -> Fence | None:
        if fence is None:
            return None
        # A share's fence group is "group/topic" (share_fence_group): both are names.
        parts = fence.group.split("/", 1)
        return Fence("/".join(self._in(p) for p in parts), fence.epoch)

    def fence_out(self, fence: Fence) -> Fence:
        parts = fence.group.split("/", 1)
        return Fence("/".join(self._out(p) for p in parts), fence.epoch)

    def _record(self, record: Record) -> Record:
        return dataclasses.replace(record, topic=self._out(record.topic))

    # OrderedLog.

    def create_topic(self, topic: str, policy: TopicPolicy) -> None:
        self.inner.create_topic(self._in(topic), policy)

    def topics(self) -> list[TopicInfo]:
        return [
            dataclasses.replace(info, name=self._out(info.name))
            for info in self.inner.topics()
            if info.name.startswith(self.ns)
        ]

    def append(
        self, topic: str, key: str, value: bytes | None, *, fence: Fence | None = None
    ) -> int:
        return self.inner.append(self._in(topic), key, value, fence=self._fence_in(fence))

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        return self.inner.append_batch(self._in(topic), records, fence=self._fence_in(fence))

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        return [self._record(r) for r in self.inner.read(self._in(topic), from_offset, limit)]

    def latest(self, topic: str) -> dict[str, Record]:
        return {k: self._record(r) for k, r in self.inner.latest(self._in(topic)).items()}

    def end_offset(self, topic: str) -> int:
        return self.inner.end_offset(self._in(topic))

    def committed(self, group: str, topic: str) -> int | None:
        return self.inner.committed(self._in(group), self._in(topic))

    def commit(self, group: str, topic: str, offset: int) -> None:
        self.inner.commit(self._in(group), self._in(topic), offset)

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> GroupMember:
        return self.inner.member(
            self._in(group), self._in(topic), member_id, session_timeout_s=session_timeout_s
        )

    def group(
        self, group: str, topics: Sequence[str], member_id: str, *, session_timeout_s: float
    ) -> NamespacedShare:
        share = self.inner.group(
            self._in(group),
            [self._in(t) for t in topics],
            member_id,
            session_timeout_s=session_timeout_s,
        )
        return NamespacedShare(share, self)

    def compact(self, topics: Iterable[str] | None = None) -> list[CompactionStats]:
        names = None if topics is None else [self._in(t) for t in topics]
        return [dataclasses.replace(s, topic=self._out(s.topic)) for s in self.inner.compact(names)]

    def close(self) -> None:
        self.inner.close()


class NamespacedShare:
    """A ``GroupShare`` whose topics and fences come back under the test's own names."""

    def __init__(self, inner: Any, log: Namespaced) -> None:
        self.inner = inner
        self._log = log

    @property
    def member_id(self) -> str:
        return str(self.inner.member_id)

    def poll(self) -> dict[str, Fence]:
        return {
            self._log._out(topic): self._log.fence_out(fence)
            for topic, fence in self.inner.poll().items()
        }

    def close(self) -> None:
        self.inner.close()


class BrokerLogs:
    """One test's namespace on the shared broker, and the handles opened in it."""

    def __init__(self, cluster: KafkaCluster, namespace: str | None = None) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap
        self.namespace = namespace or f"t{next(_namespaces)}-{uuid.uuid4().hex[:6]}."
        self._names = itertools.count()

    def spec(self, **overrides: str) -> dict[str, str]:
        """Everything a subprocess needs to open a handle in this namespace, as strings."""
        spec = {
            "backend": "kafka",
            "bootstrap": self.bootstrap,
            "namespace": self.namespace,
            "client_id": f"test-{os.getpid()}-{next(self._names)}",
            "request_timeout_s": str(TEST_TIMEOUTS.request_s),
            "delivery_timeout_s": str(TEST_TIMEOUTS.delivery_s),
            "admin_timeout_s": str(TEST_TIMEOUTS.admin_s),
            "max_value_bytes": str(DEFAULT_MAX_VALUE_BYTES),
        }
        spec.update(overrides)
        return spec

    def open_log(
        self,
        *,
        clock: Clock | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        **kwargs: Any,
    ) -> Namespaced:
        """A new handle; extra keyword arguments go to ``KafkaLog``."""
        kwargs.setdefault("client_id", f"test-{os.getpid()}-{next(self._names)}")
        kwargs.setdefault("timeouts", TEST_TIMEOUTS)
        kwargs.setdefault("internal_prefix", f"{self.namespace}__pushjobs")
        inner = KafkaLog(self.bootstrap, clock=clock, max_value_bytes=max_value_bytes, **kwargs)
        return Namespaced(inner, self.namespace)


def open_log_from_spec(spec: Mapping[str, str], *, clock: Clock | None = None) -> Namespaced:
    """Open a handle from ``BrokerLogs.spec()``: the call a subprocess makes."""
    namespace = spec["namespace"]
    inner = KafkaLog(
        spec["bootstrap"],
        client_id=spec["client_id"],
        timeouts=KafkaTimeouts(
            request_s=float(spec["request_timeout_s"]),
            delivery_s=float(spec["delivery_timeout_s"]),
            admin_s=float(spec["admin_timeout_s"]),
        ),
        max_value_bytes=int(spec["max_value_bytes"]),
        internal_prefix=f"{namespace}__pushjobs",
        clock=clock,
    )
    return Namespaced(inner, namespace)
