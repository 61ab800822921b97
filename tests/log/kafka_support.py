"""Kafka log handles for tests, on librdkafka's mock cluster (the contract with conftest).

One host process (``tests/log/mock_cluster.py``) serves the whole test session; each test
gets its own cluster inside it, so topics, groups and offsets never leak between tests
and a test may use any names it likes.

    host = shared_host()                   # started once per session, killed by PID at exit
    cluster = host.new_cluster()           # per test: an empty, isolated Kafka
    log = cluster.open_log()               # a new KafkaLog handle (as many as you like)
    cluster.make_topic("jobs")             # pre-create single-partition (optional)
    spec = cluster.spec()                  # dict[str, str] for a subprocess, which calls
    log = open_log_from_spec(spec)         #   this to open its own handle
    cluster.close()                        # at teardown

``open_log`` passes ``make_topic`` to the log as its ``create_fallback``: the mock refuses
the admin API, so ``create_topic`` creates topics single-partition through the host. A
handle opened from a spec (in a subprocess) has no host pipe and lets the mock auto-create
(4 partitions, of which the log uses only partition 0); create topics in the test
process when their partition count matters.

Timing: the mock's KIP-848 group session timeout is the cluster's (``session_timeout_ms``,
default 6 s), whatever ``session_timeout_s`` a member asks for: an owner killed with
SIGKILL is replaced after ~6.1 s. Consumers poll with ``fetch.wait.max.ms`` 5 ms because
the mock does not wake waiting fetches when records arrive.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pushjobs.clock import Clock
from pushjobs.log.base import DEFAULT_MAX_VALUE_BYTES
from pushjobs.log.kafka.kafka_log import KafkaLog, KafkaTimeouts

MOCK_CLUSTER_PY = Path(__file__).with_name("mock_cluster.py")
DEFAULT_SESSION_TIMEOUT_MS = 6000
HOST_REPLY_TIMEOUT_S = 10.0
# Short enough that a test against a dead cluster fails in seconds, long enough for a
# loaded CI machine.
TEST_TIMEOUTS = KafkaTimeouts(request_s=10.0, delivery_s=10.0, admin_s=2.0)
FAST_CONSUMER = {"fetch.wait.max.ms": 5}

# What the mock cluster cannot show, for conformance tests to skip with the reason.
UNSUPPORTED = {
    "compaction": "librdkafka's mock cluster never compacts; KafkaLog.compact() only reports",
    "retention": "librdkafka's mock cluster applies no retention.ms/retention.bytes",
    "durability": "librdkafka's mock cluster keeps everything in its host process's memory",
}


def available() -> str | None:
    """None if Kafka tests can run here, else the reason to skip them."""
    if importlib.util.find_spec("confluent_kafka") is None:
        return "confluent-kafka is not installed (pip install 'pushjobs[kafka]')"
    return None


class HostError(RuntimeError):
    """The mock cluster host answered with an error or not at all."""


class MockClusterHost:
    """A ``mock_cluster.py`` process and a line-oriented conversation with it."""

    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._lock = threading.Lock()
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                str(MOCK_CLUSTER_PY),
                "--session-timeout-ms",
                str(session_timeout_ms),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.pid = self._proc.pid
        # A reader thread turns the pipe into a queue, so every wait has a deadline.
        threading.Thread(target=self._pump, name=f"mock-cluster-{self.pid}", daemon=True).start()
        self.bootstrap = self._reply()
        self.default = MockCluster(self, 0, self.bootstrap)

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _reply(self) -> str:
        try:
            line = self._lines.get(timeout=HOST_REPLY_TIMEOUT_S)
        except queue.Empty:
            raise HostError(f"mock cluster host {self.pid}: no answer") from None
        if line is None:
            raise HostError(f"mock cluster host {self.pid} exited ({self._proc.poll()})")
        return line

    def command(self, line: str) -> str:
        """Send one command; return the text after ``ok``, raise ``HostError`` otherwise."""
        with self._lock:
            if self._proc.poll() is not None or self._proc.stdin is None:
                raise HostError(f"mock cluster host {self.pid} is not running")
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
            answer = self._reply()
        if answer == "ok" or answer.startswith("ok "):
            return answer[3:]
        raise HostError(f"{line!r}: {answer}")

    def new_cluster(self, session_timeout_ms: int | None = None) -> MockCluster:
        ms = self.session_timeout_ms if session_timeout_ms is None else session_timeout_ms
        cluster_id, bootstrap = self.command(f"new_cluster {ms}").split()
        return MockCluster(self, int(cluster_id), bootstrap)

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        """Ask the host to quit; kill it by PID if it does not within a few seconds."""
        if self._proc.poll() is None:
            with contextlib.suppress(HostError, OSError):
                self.command("quit")
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self._proc.wait(timeout=5)
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class MockCluster:
    """One cluster inside a host: what a test needs to open and describe Kafka logs."""

    _namespaces = itertools.count()

    def __init__(self, host: MockClusterHost, cluster_id: int, bootstrap: str) -> None:
        self.host = host
        self.cluster_id = cluster_id
        self.bootstrap = bootstrap
        self._names = itertools.count()

    def make_topic(self, name: str, partitions: int = 1) -> None:
        self.host.command(f"@{self.cluster_id} topic {name} {partitions}")

    def set_down(self) -> None:
        """Take every broker off the network: clients see connection refused."""
        self.host.command(f"@{self.cluster_id} down")

    def set_up(self) -> None:
        self.host.command(f"@{self.cluster_id} up")

    def fail_produce(self, kafka_error_code: int, count: int = 1) -> None:
        """The next ``count`` produce requests fail with that Kafka protocol error code."""
        self.host.command(f"@{self.cluster_id} produce_errors {kafka_error_code} {count}")

    def spec(self, **overrides: str) -> dict[str, str]:
        """Everything a subprocess needs to open a handle to this cluster, as strings."""
        spec = {
            "backend": "kafka",
            "bootstrap": self.bootstrap,
            "client_id": f"test-{os.getpid()}-{next(self._names)}",
            "fetch_wait_max_ms": str(FAST_CONSUMER["fetch.wait.max.ms"]),
            "request_timeout_s": str(TEST_TIMEOUTS.request_s),
            "delivery_timeout_s": str(TEST_TIMEOUTS.delivery_s),
            "admin_timeout_s": str(TEST_TIMEOUTS.admin_s),
            "max_value_bytes": str(DEFAULT_MAX_VALUE_BYTES),
            "group_protocol": "consumer",
        }
        spec.update(overrides)
        return spec

    def open_log(
        self,
        *,
        clock: Clock | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        **kwargs: Any,
    ) -> KafkaLog:
        """A new handle; extra keyword arguments go to ``KafkaLog``."""
        kwargs.setdefault("client_id", f"test-{os.getpid()}-{next(self._names)}")
        kwargs.setdefault("consumer_config", FAST_CONSUMER)
        kwargs.setdefault("timeouts", TEST_TIMEOUTS)
        kwargs.setdefault("create_fallback", self.make_topic)
        return KafkaLog(self.bootstrap, clock=clock, max_value_bytes=max_value_bytes, **kwargs)

    def close(self) -> None:
        if self.cluster_id != 0 and self.host.running:
            with contextlib.suppress(HostError, KeyError):
                self.host.command(f"drop_cluster {self.cluster_id}")


def open_log_from_spec(spec: Mapping[str, str], *, clock: Clock | None = None) -> KafkaLog:
    """Open a handle from ``MockCluster.spec()``: the call a subprocess makes."""
    return KafkaLog(
        spec["bootstrap"],
        client_id=spec["client_id"],
        consumer_config={"fetch.wait.max.ms": int(spec["fetch_wait_max_ms"])},
        timeouts=KafkaTimeouts(
            request_s=float(spec["request_timeout_s"]),
            delivery_s=float(spec["delivery_timeout_s"]),
            admin_s=float(spec["admin_timeout_s"]),
        ),
        max_value_bytes=int(spec["max_value_bytes"]),
        group_protocol="classic" if spec.get("group_protocol") == "classic" else "consumer",
        clock=clock,
    )


class _Shared:
    """The session's one host process, started on first use."""

    lock = threading.Lock()
    host: MockClusterHost | None = None


def shared_host() -> MockClusterHost:
    """The session's one host process, started on first use and stopped at exit."""
    with _Shared.lock:
        if _Shared.host is None or not _Shared.host.running:
            _Shared.host = MockClusterHost()
            atexit.register(_Shared.host.close)
        return _Shared.host


def stop_shared_host() -> None:
    """Stop the session's host now (a session fixture's teardown); idempotent."""
    with _Shared.lock:
        if _Shared.host is not None:
            _Shared.host.close()
            _Shared.host = None


@contextlib.contextmanager
def fresh_cluster(session_timeout_ms: int | None = None) -> Iterator[MockCluster]:
    """A new isolated cluster on the shared host, dropped on exit (a per-test fixture)."""
    cluster = shared_host().new_cluster(session_timeout_ms)
    try:
        yield cluster
    finally:
        cluster.close()
