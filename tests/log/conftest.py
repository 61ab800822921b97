"""Backends for the conformance suite: one ``Harness`` per backend, a factory of handles.

The contract, for every backend (``memory``, ``sqlite``, ``kafka``, ``kafka-broker``):

    harness = log_backend                 # parametrized fixture, one per backend
    log = log_factory()                   # a NEW handle on the SAME log, closed at teardown
    harness.clock                         # the FakeClock every handle stamps records with
    harness.expire(seconds)               # let lease time pass: advance the fake clock,
                                          #   or do nothing where the broker keeps time
    harness.takeover_s                    # how long a takeover may take in real time
    harness.session_s                     # the member session timeout tests use
    harness.spec()                        # dict[str, str] a child process opens with
                                          #   tests.log.spec.open_from_spec (skips memory)
    harness.require("compaction")         # pytest.skip(reason) if the backend lacks it

Kafka comes from ``tests/log/kafka_support.py`` (the Kafka backend's own test support):
this file uses ``available()``, ``fresh_cluster(session_timeout_ms)``, the cluster's
``open_log(clock=...)`` and ``spec()``, ``open_log_from_spec(spec)`` (in children),
``UNSUPPORTED`` (feature -> reason) and ``stop_shared_host()``. If that module is missing
or cannot run here, the kafka params skip with the reason; nothing fails.

``kafka-broker`` is a real Apache Kafka (``tests/kafka_broker.py``: one broker for the
session, each test in a namespace of its own, ``tests/log/broker_support.py``). Without
Java or the jars it skips with the reason, except under ``PUSHJOBS_REQUIRE_KAFKA`` (CI),
where it fails. Where it can run, it carries the contract on Kafka and the mock's
``kafka`` param skips (the mock stays for the Kafka-only tests: fault injection, the
client's own behaviour); where it cannot, the mock runs the contract instead.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.clock import FakeClock
from pushjobs.log.base import OrderedLog
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from tests.kafka_broker import broker_or_skip, mock_unless_broker, stop_shared_broker
from tests.log.children import Child

BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("kafka", marks=pytest.mark.kafka),
    pytest.param("kafka-broker", marks=pytest.mark.kafka),
]
# The mock's session timeout for these tests: short, so takeovers stay quick (the mock
# heartbeats every sixth of it; 3 s made the Kafka tests of tests/log 18 s slower in all).
KAFKA_SESSION_MS = 2000
# A real broker's group sessions for these tests (the broker lets groups go this low:
# pushjobs.testbed.kafkabroker.TEST_SETTINGS).
BROKER_SESSION_S = 2.0
# What the conformance tests cannot show on a real broker, and why (and where it is shown).
BROKER_UNSUPPORTED = {
    "compaction": "compact() only reports on Kafka: the broker's log cleaner compacts in its "
    "own time, never the active segment (tests/log/test_kafka_broker.py shows it does)",
    "retention": "compact() only reports on Kafka: the broker applies retention in its own "
    "time, on its clock (tests/log/test_kafka_broker.py shows it does)",
}
# What the memory backend cannot do, and why.
MEMORY_UNSUPPORTED = {
    "processes": "the memory backend lives inside one process: no child can open it",
}


class Harness:
    """One backend's log for one test; ``open()`` makes handles on it."""

    name: str
    session_s = 1.0
    takeover_s = 10.0
    unsupported: dict[str, str] = {}

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._handles: list[OrderedLog] = []

    def open(self, **kwargs: Any) -> OrderedLog:
        handle = self._open(**kwargs)
        self._handles.append(handle)
        return handle

    def _open(self, **kwargs: Any) -> OrderedLog:
        raise NotImplementedError

    def spec(self) -> dict[str, str]:
        self.require("processes")
        raise NotImplementedError

    def expire(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def require(self, feature: str) -> None:
        reason = self.unsupported.get(feature)
        if reason is not None:
            pytest.skip(f"{self.name}: {reason}")

    def close(self) -> None:
        for handle in self._handles:
            handle.close()


class MemoryHarness(Harness):
    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore()
        self.unsupported = MEMORY_UNSUPPORTED

    def _open(self, **kwargs: Any) -> OrderedLog:
        kwargs.setdefault("clock", self.clock)
        return MemoryLog(self.store, **kwargs)


class SqliteHarness(Harness):
    name = "sqlite"
    session_s = 0.5  # children run on the real clock: a short session keeps takeovers fast

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def _open(self, **kwargs: Any) -> OrderedLog:
        kwargs.setdefault("clock", self.clock)
        return SqliteLog(self.path, **kwargs)

    def spec(self) -> dict[str, str]:
        return {"backend": "sqlite", "path": str(self.path)}


class KafkaHarness(Harness):
    name = "kafka"
    session_s = KAFKA_SESSION_MS / 1000
    # The mock cluster hands a dead owner's partition over after its session timeout.
    takeover_s = 3 * KAFKA_SESSION_MS / 1000 + 10

    def __init__(self, support: Any, cluster: Any) -> None:
        super().__init__()
        self.support = support
        self.cluster = cluster
        self.unsupported = dict(getattr(support, "UNSUPPORTED", {}))

    def _open(self, **kwargs: Any) -> OrderedLog:
        kwargs.setdefault("clock", self.clock)
        return self.cluster.open_log(**kwargs)  # type: ignore[no-any-return]

    def spec(self) -> dict[str, str]:
        return dict(self.cluster.spec())

    def expire(self, seconds: float) -> None:
        """The broker keeps lease time: callers wait up to ``takeover_s`` instead."""


class BrokerHarness(Harness):
    """A namespace of its own on the session's real broker (``tests/log/broker_support.py``)."""

    name = "kafka-broker"
    session_s = BROKER_SESSION_S
    # The group coordinator hands a dead owner's partition over after its session timeout.
    takeover_s = 3 * BROKER_SESSION_S + 10
    unsupported = BROKER_UNSUPPORTED

    def __init__(self, logs: Any) -> None:
        super().__init__()
        # The broker checks record timestamps against its own clock (at most an hour
        # ahead by default) and applies retention by them: start the fake clock at now.
        self.clock = FakeClock(wall_ms=time.time_ns() // 1_000_000)
        self.logs = logs

    def _open(self, **kwargs: Any) -> OrderedLog:
        kwargs.setdefault("clock", self.clock)
        return self.logs.open_log(**kwargs)  # type: ignore[no-any-return]

    def spec(self) -> dict[str, str]:
        return dict(self.logs.spec())

    def expire(self, seconds: float) -> None:
        """The broker keeps lease time: callers wait up to ``takeover_s`` instead."""


def _kafka_support() -> Any:
    """tests.log.kafka_support, or pytest.skip with the reason it cannot be used."""
    try:
        support = importlib.import_module("tests.log.kafka_support")
    except ImportError as exc:
        pytest.skip(f"kafka: tests/log/kafka_support.py cannot be imported: {exc}")
    reason = support.available() if hasattr(support, "available") else None
    if reason:
        pytest.skip(f"kafka: {reason}")
    if not hasattr(support, "fresh_cluster"):
        pytest.skip("kafka: tests/log/kafka_support.py has no fresh_cluster() yet")
    return support


@contextlib.contextmanager
def _harness(name: str, tmp_path: Path) -> Iterator[Harness]:
    harness: Harness
    if name == "kafka-broker":
        from tests.log.broker_support import BrokerLogs

        harness = BrokerHarness(BrokerLogs(broker_or_skip()))
        try:
            yield harness
        finally:
            harness.close()
        return
    if name == "kafka":
        mock_unless_broker()
        support = _kafka_support()
        with support.fresh_cluster(KAFKA_SESSION_MS) as cluster:
            harness = KafkaHarness(support, cluster)
            try:
                yield harness
            finally:
                harness.close()
        return
    harness = MemoryHarness() if name == "memory" else SqliteHarness(tmp_path / "log.db")
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture(scope="session", autouse=True)
def _stop_kafka_host() -> Iterator[None]:
    """Stop the mock cluster's host process, if any test started it."""
    yield
    support = sys.modules.get("tests.log.kafka_support")
    if support is not None and hasattr(support, "stop_shared_host"):
        support.stop_shared_host()
    stop_shared_broker()


@pytest.fixture(scope="session")
def kafka_host() -> Any:
    """The mock cluster's host process, for the Kafka-only tests (stopped at the end)."""
    return _kafka_support().shared_host()


@pytest.fixture
def cluster(kafka_host: Any) -> Iterator[Any]:
    """A fresh mock cluster on the shared host, its sessions ``KAFKA_SESSION_MS`` long."""
    cluster = kafka_host.new_cluster(KAFKA_SESSION_MS)
    yield cluster
    cluster.close()


@pytest.fixture(params=BACKENDS)
def log_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    with _harness(request.param, tmp_path) as harness:
        yield harness


@pytest.fixture(params=["memory", "sqlite"])
def embedded_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """The backends that compact and keep retention themselves."""
    with _harness(request.param, tmp_path) as harness:
        yield harness


@pytest.fixture
def log_factory(log_backend: Harness) -> Callable[..., OrderedLog]:
    return log_backend.open


@pytest.fixture
def children() -> Iterator[Callable[..., Child]]:
    """Start ``python ARGS...``; every child is stopped (by PID) at teardown."""
    started: list[Child] = []

    def start(*args: str) -> Child:
        child = Child(*args)
        started.append(child)
        return child

    yield start
    for child in started:
        child.close()
