"""The test session's one real Kafka broker (``pushjobs.testbed.kafkabroker``).

A JVM start costs seconds, so one single-node broker serves every test of the session
that needs one; tests keep apart by naming everything they create under a namespace of
their own (``tests/log/broker_support.py``, or a server's ``[log] topic_prefix``). It is
started on first use and stopped by PID at the end of the session (and dies with the
test process if that is killed: ``kafkabroker``'s death signal).

    cluster = broker_or_skip()      # the shared KafkaCluster, started on first use
    reason = broker_unavailable()   # why none can run here, or None
    table = server_log(cluster)     # a server's [log] there, under a topic prefix of its own
    mock_unless_broker()            # a mock copy of a test: skip where the broker runs it

Without Java or the jars, the tests that need a broker skip and say why, except where
``PUSHJOBS_REQUIRE_KAFKA`` is set (``.ci/run`` sets it): there they fail.
"""

from __future__ import annotations

import atexit
import itertools
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from pushjobs.errors import BrokerUnavailable
from pushjobs.testbed import kafkabroker
from pushjobs.testbed.kafkabroker import KafkaCluster

_prefixes = itertools.count()


def server_log(cluster: KafkaCluster, prefix: str | None = None) -> dict[str, object]:
    """The ``[log]`` table of servers on ``cluster``: their topics and groups under a
    ``topic_prefix`` no other test uses (the product's own way for installations to
    share a cluster)."""
    return {
        "backend": "kafka",
        "bootstrap_servers": cluster.bootstrap,
        "topic_prefix": prefix or f"e{next(_prefixes)}-{uuid.uuid4().hex[:6]}.",
    }


class _Shared:
    lock = threading.Lock()
    cluster: KafkaCluster | None = None
    scratch: tempfile.TemporaryDirectory[str] | None = None
    failure: str | None = None  # a start that failed is not tried again by every test


def broker_unavailable() -> str | None:
    """Why no broker can run here (no Java, no jars, no confluent-kafka), or None."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed (pip install 'pushjobs[kafka]')"
    return kafkabroker.unavailable()


def skip_or_fail(reason: str) -> None:
    """Skip, saying why; fail instead where a broker is required (CI)."""
    if kafkabroker.required():
        pytest.fail(f"a Kafka broker is required here ({kafkabroker.REQUIRE_ENV}): {reason}")
    pytest.skip(f"kafka broker: {reason}")


def shared_broker() -> KafkaCluster:
    """The session's single-node broker, started on first use; raises if it cannot run."""
    with _Shared.lock:
        if _Shared.failure is not None:
            raise BrokerUnavailable(_Shared.failure)
        if _Shared.cluster is None:
            _Shared.scratch = tempfile.TemporaryDirectory(prefix="pushjobs-kafka-")
            cluster = KafkaCluster(Path(_Shared.scratch.name), nodes=1)
            try:
                cluster.start()
            except Exception as exc:
                _Shared.failure = f"the session's broker did not start: {exc}"
                raise
            _Shared.cluster = cluster
            atexit.register(stop_shared_broker)
        return _Shared.cluster


def broker_or_skip() -> KafkaCluster:
    reason = broker_unavailable()
    if reason is not None:
        skip_or_fail(reason)
    return shared_broker()


def mock_unless_broker() -> None:
    """Where the real broker can run, a test's copy on librdkafka's mock skips: its
    ``kafka-broker`` copy runs instead (the mock stays for what only it can do, and for
    machines without Java)."""
    if broker_unavailable() is None:
        pytest.skip("kafka: the real broker runs this here (its kafka-broker copy)")


def stop_shared_broker() -> None:
    """Stop the session's broker (a session fixture's teardown, and at exit); idempotent."""
    with _Shared.lock:
        if _Shared.cluster is not None:
            _Shared.cluster.stop()
            _Shared.cluster = None
        if _Shared.scratch is not None:
            _Shared.scratch.cleanup()
            _Shared.scratch = None
