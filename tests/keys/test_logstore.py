"""The key registry in the ordered log: a real SQLite log, a real Kafka broker, and
librdkafka's mock cluster where no broker can run."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from keys.entry import Entry
from keys.identity import generate
from keys.registry import KeyRegistry, KeyState
from keys.topicstore import KeyFold, LogStore, changes, decode, encode
from pushjobs.clock import FakeClock
from pushjobs.errors import KeyFileError
from pushjobs.log import topics
from pushjobs.log.base import OrderedLog, Record
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from tests.kafka_broker import broker_or_skip, mock_unless_broker

NOW = 1_700_000_000_000
TOPIC = topics.names().keys


class Logs:
    """Handles on one log, as several servers (or a server and a CLI) hold them."""

    def __init__(self, opener: Any) -> None:
        self._open = opener
        self.handles: list[OrderedLog] = []
        self.clock = FakeClock(wall_ms=NOW)

    def open(self) -> OrderedLog:
        handle: OrderedLog = self._open()
        handle.create_topic(TOPIC, topics.KEYS.policy)
        self.handles.append(handle)
        return handle

    def registry(self, handle: OrderedLog | None = None) -> tuple[KeyRegistry, LogStore]:
        store = LogStore(handle or self.open(), TOPIC, clock=self.clock)
        return KeyRegistry(store, clock=self.clock), store

    def close(self) -> None:
        for handle in self.handles:
            handle.close()


@contextlib.contextmanager
def _kafka() -> Iterator[Logs]:
    mock_unless_broker()
    support = importlib.import_module("tests.log.kafka_support")
    reason = support.available()
    if reason:
        pytest.skip(f"kafka: {reason}")
    with support.fresh_cluster() as cluster:
        cluster.make_topic(TOPIC)
        logs = Logs(cluster.open_log)
        try:
            yield logs
        finally:
            logs.close()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("kafka", marks=pytest.mark.kafka),
        pytest.param("kafka-broker", marks=pytest.mark.kafka),
    ]
)
def logs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Logs]:
    if request.param == "kafka-broker":
        from tests.log.broker_support import BrokerLogs

        broker_logs = Logs(BrokerLogs(broker_or_skip()).open_log)
        try:
            yield broker_logs
        finally:
            broker_logs.close()
        return
    if request.param == "kafka":
        with _kafka() as kafka_logs:
            yield kafka_logs
        return
    sqlite_logs = Logs(lambda: SqliteLog(tmp_path / "log.db"))
    try:
        yield sqlite_logs
    finally:
        sqlite_logs.close()


def pub(name: str = "web-01", kind: str = "node"):
    return generate(name, kind).public


def present(registry: KeyRegistry, public, *, auto_accept: bool = False) -> KeyState:
    return registry.present(
        public.name,
        public.kind,
        public.ed25519_public,
        public.curve_public,
        auto_accept=auto_accept,
    )


def test_another_server_sees_every_change_once_it_follows(logs: Logs) -> None:
    leader, _ = logs.registry()
    standby, standby_store = logs.registry()
    alice = pub("alice", "user")
    leader.add(alice, state=KeyState.ACCEPTED, role="admin")
    assert present(leader, pub("web-01")) is KeyState.PENDING
    assert present(leader, pub("web-02")) is KeyState.PENDING
    leader.accept(["web-01"])
    leader.reject(["web-02"])
    leader.set_role("alice", "writer")
    assert standby.find("alice") is None  # read within follow_s: not caught up yet
    logs.clock.advance(standby_store.follow_s)
    assert {e.name: e.state for e in standby.list()} == {
        "alice": KeyState.ACCEPTED,
        "web-01": KeyState.ACCEPTED,
        "web-02": KeyState.REJECTED,
    }
    assert standby.get("alice").role == "writer"
    assert standby.is_authorized("alice", alice.fingerprint)
    assert standby.list() == leader.list()


def test_one_record_per_name_and_a_tombstone_on_delete(logs: Logs) -> None:
    registry, store = logs.registry()
    web = pub("web-01")
    present(registry, web)
    impostor = pub("web-01")
    assert present(registry, impostor) is KeyState.DENIED
    assert present(registry, pub("web-01")) is KeyState.DENIED  # folded into the one entry
    handle = logs.open()
    records = handle.read(TOPIC)
    assert [r.key for r in records] == ["key:web-01"] * 3
    assert records[-1].value is not None
    main, denied = decode("web-01", records[-1].value)
    assert (main.state, denied.state, denied.attempts) == (KeyState.PENDING, KeyState.DENIED, 2)
    removed = registry.delete(["web-01"])
    assert len(removed) == 2
    last = handle.read(TOPIC, store.next_offset - 1)
    assert [(r.key, r.value) for r in last] == [("key:web-01", None)]
    assert registry.list() == [] and handle.latest(TOPIC) == {}


def test_reads_follow_from_the_last_offset_and_keep_their_tuple(logs: Logs) -> None:
    writer, _ = logs.registry()
    reader, store = logs.registry()
    writer.add(pub("web-01"))
    logs.clock.advance(store.follow_s)
    first = reader.entries()
    assert [e.name for e in first] == ["web-01"] and store.next_offset == 1
    logs.clock.advance(store.follow_s)
    assert reader.entries() is first  # nothing new: the same tuple, indexes kept
    writer.add(pub("web-02"))
    logs.clock.advance(store.follow_s)
    assert [e.name for e in reader.entries()] == ["web-01", "web-02"]
    assert store.next_offset == 2


def test_a_write_catches_up_first_so_it_never_undoes_another_writer(logs: Logs) -> None:
    one, _ = logs.registry()
    two, _ = logs.registry()
    one.add(pub("web-01"))
    two.add(pub("web-02"))  # without waiting for follow_s
    two.accept(["web-01"])
    assert {e.name: e.state for e in one.list()} == {"web-01": KeyState.PENDING}
    logs.clock.advance(1.0)
    assert {e.name: e.state for e in one.list()} == {
        "web-01": KeyState.ACCEPTED,
        "web-02": KeyState.PENDING,
    }


def test_a_failed_change_writes_nothing(logs: Logs) -> None:
    registry, store = logs.registry()
    registry.add(pub("web-01"))
    with pytest.raises(KeyFileError):
        registry.add_many([pub("web-02"), pub("web-01")])  # conflict: all or nothing
    assert store.next_offset == 1 and [e.name for e in registry.list()] == ["web-01"]


def test_an_unreadable_record_is_counted_and_grants_nothing(logs: Logs) -> None:
    registry, store = logs.registry()
    node = pub("web-01")
    present(registry, node, auto_accept=True)
    handle = logs.open()
    handle.append(TOPIC, "key:web-01", b"{not json")
    handle.append(TOPIC, "key:web-02", encode(registry.list()))  # entries of another name
    handle.append(TOPIC, "note:something", b"{}")  # not an entry: ignored
    logs.clock.advance(store.follow_s)
    assert registry.list() == []
    assert store.dropped == 2


def test_the_snapshot_serves_another_thread_without_the_log(tmp_path: Path) -> None:
    handle = SqliteLog(tmp_path / "log.db")
    handle.create_topic(TOPIC, topics.KEYS.policy)
    store = LogStore(handle, TOPIC, clock=FakeClock())
    registry = KeyRegistry(store)
    zap = KeyRegistry(store.snapshot())
    node = pub("web-01")
    present(registry, node, auto_accept=True)
    handle.close()  # the view reads no log: what the loop folded is enough
    entry = zap.by_curve_key(node.curve_public)
    assert entry is not None and entry.state is KeyState.ACCEPTED
    assert not zap.writable()
    with pytest.raises(KeyFileError, match="read-only"):
        zap.accept(["web-01"])


def test_writes_go_through_the_given_writer_and_its_refusal_is_a_key_error(
    tmp_path: Path,
) -> None:
    handle = SqliteLog(tmp_path / "log.db")
    handle.create_topic(TOPIC, topics.KEYS.policy)
    written: list[list[tuple[str, bytes | None]]] = []

    def refuse(batch):
        written.append(list(batch))
        raise KeyFileError("this server is not the leader")

    try:
        store = LogStore(handle, TOPIC, write=refuse, writable=lambda: False)
        registry = KeyRegistry(store)
        assert not registry.writable()
        with pytest.raises(KeyFileError, match="not the leader"):
            registry.add(pub("web-01"))
        assert len(written) == 1 and registry.list() == []
    finally:
        handle.close()


def test_changes_are_per_name() -> None:
    a, b = (generate(n, "node").public for n in ("a", "b"))
    ea = Entry.new(a, KeyState.PENDING, None, NOW)
    eb = Entry.new(b, KeyState.PENDING, None, NOW)
    registry_entries = [ea, eb]
    assert changes(registry_entries, registry_entries) == []
    accepted = Entry.new(a, KeyState.ACCEPTED, None, NOW)
    assert changes(registry_entries, [accepted, eb]) == [("key:a", encode([accepted]))]
    assert changes(registry_entries, [eb]) == [("key:a", None)]
    value = orjson.loads(encode([ea]))
    assert value["format"] == "pushjobs-key/1" and value["entries"][0]["name"] == "a"


def test_the_fold_skips_a_deposed_leaders_late_write() -> None:
    node = generate("web-01", "node").public
    pending = Entry.new(node, KeyState.PENDING, None, NOW)
    accepted = Entry.new(node, KeyState.ACCEPTED, None, NOW)
    rejected = Entry.new(node, KeyState.REJECTED, None, NOW)

    def rec(offset: int, entry: Entry | None, epoch: int) -> Record:
        value = encode([entry]) if entry is not None else None
        return Record(TOPIC, offset, "key:web-01", value, NOW, epoch)

    fold = KeyFold()
    assert fold.apply(rec(0, pending, 0))  # imported, or a CLI's write: no epoch
    assert fold.apply(rec(1, accepted, 1))
    assert fold.apply(rec(2, rejected, 2))  # the successor revokes it
    assert not fold.apply(rec(3, accepted, 1))  # the old leader wakes up late
    assert fold.entries() == (rejected,)
    assert fold.apply(rec(4, accepted, 0))  # an admin's local write is not fenced
    assert fold.entries() == (accepted,)
    assert fold.apply(rec(5, None, 2)) and fold.entries() == ()
    assert not fold.apply(rec(6, None, 2))  # nothing left to remove
    assert fold.dropped == 0


def test_a_log_that_cannot_be_read_leaves_the_registry_in_force_and_is_tried_less_often(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    handle = SqliteLog(tmp_path / "log.db")
    handle.create_topic(TOPIC, topics.KEYS.policy)
    store = LogStore(handle, TOPIC, clock=clock)
    registry = KeyRegistry(store)
    node = pub("web-01")
    present(registry, node, auto_accept=True)
    handle.close()  # every read fails from now on
    delays = []
    for _ in range(8):
        clock.advance(10.0)
        before = clock.monotonic()
        assert registry.find("web-01") is not None  # still in force
        delays.append(store.next_follow - before)
    assert delays[:3] == [pytest.approx(0.4), pytest.approx(0.8), pytest.approx(1.6)]
    assert delays[-1] == pytest.approx(5.0)
    assert caplog.text.count("cannot follow") == 1
    with pytest.raises(KeyFileError, match="cannot read the key registry"):
        registry.accept(["web-01"])
