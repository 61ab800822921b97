"""Host process for librdkafka's mock Kafka cluster, for tests.

Run as ``python tests/log/mock_cluster.py [--brokers N] [--session-timeout-ms MS]``. The
first stdout line is the bootstrap string (``127.0.0.1:port,...``); after that the process
reads one command per stdin line and answers one line, ``ok [detail]`` or ``error reason``:

    ping                          liveness check
    topic NAME [PARTITIONS]       create a topic (default 1 partition); "ok N" gives the
                                  partition count actually created
    down [BROKER] / up [BROKER]   take a broker off the network / back (default -1: all)
    produce_errors CODE COUNT     the next COUNT produce requests fail with Kafka error CODE
    rtt MS [BROKER]               add MS of round-trip delay to every answer
    new_cluster [SESSION_MS]      another, independent cluster: "ok ID BOOTSTRAP"
    drop_cluster ID               destroy cluster ID
    quit                          destroy every cluster and exit

The first cluster has id 0. A command prefixed with ``@ID`` (``@2 topic jobs``) acts on
cluster ID instead of cluster 0, so one host process serves a whole test session with a
fresh, isolated cluster per test.

The process exits when stdin closes, so a test runner that dies takes the cluster with it.

Why a separate process: the mock cluster lives inside one librdkafka handle. Hosting it
apart from the processes under test lets a test SIGKILL a group member (or its whole
process) while the cluster keeps the group's state, as a real broker would.

Why ctypes: only the C API (``rd_kafka_mock_*``, exported by the librdkafka bundled in the
confluent-kafka wheel) creates single-partition topics, sets the controller id (without it
admin requests hang until their timeout) and injects faults. If that library cannot be
loaded, a client with ``test.mock.num.brokers`` hosts the cluster instead; topics are then
auto-created with the mock's default of 4 partitions ("ok 4") and fault commands answer
``error unsupported``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib.util
import sys
from pathlib import Path
from typing import Any

RD_KAFKA_PRODUCER = 0
PRODUCE_API_KEY = 0


def _find_librdkafka() -> str | None:
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is not None and spec.origin is not None:
        site = Path(spec.origin).resolve().parent.parent
        # auditwheel/delocate put the bundled copy beside the package under a mangled name.
        for libs in ("confluent_kafka.libs", "confluent_kafka/.dylibs"):
            found = sorted((site / libs).glob("librdkafka*"))
            if found:
                return str(found[0])
    return ctypes.util.find_library("rdkafka")


class CMockCluster:
    """A mock cluster driven through the bundled librdkafka's ``rd_kafka_mock_*`` API."""

    def __init__(self, brokers: int, session_timeout_ms: int | None) -> None:
        path = _find_librdkafka()
        if path is None:
            raise OSError("librdkafka not found")
        lib = ctypes.CDLL(path)
        vp, cp, i32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32
        lib.rd_kafka_conf_new.restype = vp
        lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, ctypes.c_size_t]
        lib.rd_kafka_new.restype = vp
        lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, cp, ctypes.c_size_t]
        lib.rd_kafka_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_new.restype = vp
        lib.rd_kafka_mock_cluster_new.argtypes = [vp, ctypes.c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
        lib.rd_kafka_mock_cluster_bootstraps.restype = cp
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
        lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, ctypes.c_int, ctypes.c_int]
        lib.rd_kafka_mock_set_controller_id.argtypes = [vp, i32]
        lib.rd_kafka_mock_broker_set_down.argtypes = [vp, i32]
        lib.rd_kafka_mock_broker_set_up.argtypes = [vp, i32]
        lib.rd_kafka_mock_broker_set_rtt.argtypes = [vp, i32, ctypes.c_int]
        lib.rd_kafka_mock_push_request_errors_array.argtypes = [
            vp,
            ctypes.c_int16,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_int),
        ]
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms.argtypes = [vp, ctypes.c_int]
        lib.rd_kafka_mock_set_group_consumer_session_timeout_ms.argtypes = [vp, ctypes.c_int]
        lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms.argtypes = [vp, ctypes.c_int]
        self._lib = lib

        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        # The hosting handle never connects anywhere; keep its own logging quiet.
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self._rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self._rk:
            raise OSError(f"rd_kafka_new: {errstr.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            raise OSError("rd_kafka_mock_cluster_new failed")
        # Without a controller, admin requests are never answered: clients wait out their
        # whole timeout instead of getting "unsupported" at once.
        lib.rd_kafka_mock_set_controller_id(self._mc, 1)
        # The mock delays the first join of an empty group by 3 s like a real broker; tests
        # want takeover as fast as the session timeout allows.
        lib.rd_kafka_mock_group_initial_rebalance_delay_ms(self._mc, 0)
        if session_timeout_ms is not None:
            # Only the KIP-848 consumer protocol takes the session timeout from the broker.
            lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(self._mc, session_timeout_ms)
            lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(
                self._mc, max(100, session_timeout_ms // 6)
            )

    @property
    def bootstraps(self) -> str:
        raw: bytes = self._lib.rd_kafka_mock_cluster_bootstraps(self._mc)
        return raw.decode()

    def create_topic(self, name: str, partitions: int) -> int:
        err = self._lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions, 1)
        if err:
            raise RuntimeError(f"rd_kafka_mock_topic_create: error {err}")
        return partitions

    def set_down(self, broker: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._mc, broker), "set_down")

    def set_up(self, broker: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._mc, broker), "set_up")

    def set_rtt(self, broker: int, rtt_ms: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_rtt(self._mc, broker, rtt_ms), "rtt")

    def produce_errors(self, code: int, count: int) -> None:
        errors = (ctypes.c_int * count)(*([code] * count))
        self._lib.rd_kafka_mock_push_request_errors_array(self._mc, PRODUCE_API_KEY, count, errors)

    def close(self) -> None:
        self._lib.rd_kafka_mock_cluster_destroy(self._mc)
        self._lib.rd_kafka_destroy(self._rk)

    @staticmethod
    def _check(err: int, what: str) -> None:
        if err:
            raise RuntimeError(f"{what}: error {err}")


class ClientMockCluster:
    """Fallback: a confluent-kafka client hosting the cluster via test.mock.num.brokers."""

    def __init__(self, brokers: int) -> None:
        from confluent_kafka import Producer

        self._producer: Any = Producer(
            {"test.mock.num.brokers": brokers, "bootstrap.servers": "", "log_level": 3}
        )
        meta = self._producer.list_topics(timeout=10)
        self._bootstraps = ",".join(f"{b.host}:{b.port}" for b in meta.brokers.values())

    @property
    def bootstraps(self) -> str:
        return self._bootstraps

    def create_topic(self, name: str, partitions: int) -> int:
        # Auto-creation: the mock picks its default partition count, whatever we ask.
        meta = self._producer.list_topics(name, timeout=10)
        return len(meta.topics[name].partitions)

    def set_down(self, broker: int) -> None:
        raise RuntimeError("unsupported")

    def set_up(self, broker: int) -> None:
        raise RuntimeError("unsupported")

    def set_rtt(self, broker: int, rtt_ms: int) -> None:
        raise RuntimeError("unsupported")

    def produce_errors(self, code: int, count: int) -> None:
        raise RuntimeError("unsupported")

    def close(self) -> None:
        self._producer.flush(1)


Cluster = CMockCluster | ClientMockCluster


class Host:
    """The clusters of this process, by id, and the command interpreter over them."""

    def __init__(self, brokers: int, session_timeout_ms: int | None) -> None:
        self._brokers = brokers
        self._session_timeout_ms = session_timeout_ms
        self._use_c_api = True
        self.clusters: dict[int, Cluster] = {}
        self._next_id = 0

    def new_cluster(self, session_timeout_ms: int | None) -> tuple[int, Cluster]:
        cluster: Cluster
        if self._use_c_api:
            try:
                cluster = CMockCluster(self._brokers, session_timeout_ms)
            except (OSError, AttributeError) as exc:
                print(
                    f"mock_cluster: C API unavailable ({exc}); using test.mock.num.brokers",
                    file=sys.stderr,
                )
                self._use_c_api = False
        if not self._use_c_api:
            cluster = ClientMockCluster(self._brokers)
        cluster_id = self._next_id
        self._next_id += 1
        self.clusters[cluster_id] = cluster
        return cluster_id, cluster

    def handle(self, line: str) -> str:
        words = line.split()
        cluster_id = 0
        if words and words[0].startswith("@"):
            cluster_id = int(words.pop(0)[1:])
        if not words:
            return "error empty command"
        cmd, args = words[0], words[1:]
        if cmd == "new_cluster" and len(args) <= 1:
            session_ms = int(args[0]) if args else self._session_timeout_ms
            new_id, cluster = self.new_cluster(session_ms)
            return f"ok {new_id} {cluster.bootstraps}"
        if cmd == "drop_cluster" and len(args) == 1:
            self.clusters.pop(int(args[0])).close()
            return "ok"
        cluster = self.clusters.get(cluster_id)
        if cluster is None:
            return f"error no cluster {cluster_id}"
        if cmd == "ping":
            return "ok"
        if cmd == "topic" and len(args) in (1, 2):
            partitions = int(args[1]) if len(args) == 2 else 1
            return f"ok {cluster.create_topic(args[0], partitions)}"
        if cmd in ("down", "up") and len(args) <= 1:
            broker = int(args[0]) if args else -1
            (cluster.set_down if cmd == "down" else cluster.set_up)(broker)
            return "ok"
        if cmd == "produce_errors" and len(args) == 2:
            cluster.produce_errors(int(args[0]), int(args[1]))
            return "ok"
        if cmd == "rtt" and len(args) in (1, 2):
            cluster.set_rtt(int(args[1]) if len(args) == 2 else -1, int(args[0]))
            return "ok"
        return f"error unknown command: {line.strip()}"

    def close(self) -> None:
        for cluster in self.clusters.values():
            cluster.close()
        self.clusters.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--session-timeout-ms", type=int, default=None)
    opts = parser.parse_args(argv)
    host = Host(opts.brokers, opts.session_timeout_ms)
    try:
        _, first = host.new_cluster(opts.session_timeout_ms)
        print(first.bootstraps, flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                print("ok", flush=True)
                break
            try:
                answer = host.handle(line)
            except (RuntimeError, ValueError, KeyError) as exc:
                answer = f"error {exc!r}"
            print(answer, flush=True)
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
