"""The standard topics and opening a backend by name."""

from __future__ import annotations

import importlib.util

import pytest

from pushjobs.config import load_config
from pushjobs.errors import BackendUnavailable, ConfigError, MissingExtra
from pushjobs.log import topics
from pushjobs.log.base import TopicPolicy
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.memory import MemoryLog
from pushjobs.log.sqlite.sqlite_log import SqliteLog


def test_standard_names_carry_the_prefix():
    assert topics.names().all() == (
        "pushjobs.commands",
        "pushjobs.assignments",
        "pushjobs.control",
        "pushjobs.events",
        "pushjobs.schedules",
        "pushjobs.keys",
        "pushjobs.audit",
    )
    assert topics.names("test-7.").events == "test-7.events"


def test_standard_policies_follow_the_design():
    policies = topics.policies("p.", control_retention_ms=1000, events_retention_ms=2000)
    assert policies == {
        "p.commands": TopicPolicy(compacted=True),
        "p.assignments": TopicPolicy(compacted=True),
        "p.control": TopicPolicy(compacted=True, retention_ms=1000),
        "p.events": TopicPolicy(compacted=False, retention_ms=2000),
        "p.schedules": TopicPolicy(compacted=True),
        "p.keys": TopicPolicy(compacted=True),
        "p.audit": TopicPolicy(compacted=False),
    }


def test_create_standard_topics_is_idempotent_and_keeps_existing_policies():
    log = MemoryLog()
    log.create_topic("pushjobs.events", TopicPolicy())  # an operator's choice
    names = topics.create_standard_topics(log)
    assert topics.create_standard_topics(log) == names
    infos = {t.name: t.policy for t in log.topics()}
    assert sorted(infos) == sorted(names.all())
    assert infos[names.events] == TopicPolicy()
    assert infos[names.control] == topics.CONTROL.policy


def test_resolve_accepts_short_standard_names():
    existing = {"pushjobs.events", "custom"}
    assert topics.resolve("events", existing) == "pushjobs.events"
    assert topics.resolve("pushjobs.events", existing) == "pushjobs.events"
    assert topics.resolve("custom", existing) == "custom"
    assert topics.resolve("missing", existing) == "missing"


def test_open_memory_and_sqlite(tmp_path):
    memory = open_log(LogSettings(backend="memory", max_value_bytes=8))
    assert isinstance(memory, MemoryLog) and memory.max_value_bytes == 8
    memory.close()
    sqlite = open_log(LogSettings(path=tmp_path / "log.db", compact_every_appends=5))
    assert isinstance(sqlite, SqliteLog) and sqlite.compact_every_appends == 5
    sqlite.close()


def test_sqlite_default_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("PUSHJOBS_LOG", raising=False)
    monkeypatch.setenv("PUSHJOBS_HOME", str(tmp_path / "home"))
    assert LogSettings().sqlite_path() == tmp_path / "home" / "log.db"
    monkeypatch.setenv("PUSHJOBS_LOG", str(tmp_path / "elsewhere.db"))
    assert LogSettings().sqlite_path() == tmp_path / "elsewhere.db"


def test_open_without_create_does_not_make_a_file(tmp_path):
    with pytest.raises(BackendUnavailable):
        open_log(LogSettings(path=tmp_path / "log.db", create=False))
    assert not (tmp_path / "log.db").exists()


def test_settings_load_from_toml_and_are_checked(tmp_path):
    good = tmp_path / "log.toml"
    good.write_text('backend = "memory"\nmax_value_bytes = 4096\npath = "~/x.db"\n')
    settings = load_config(LogSettings, good, env={})
    assert (settings.backend, settings.max_value_bytes) == ("memory", 4096)
    bad = tmp_path / "bad.toml"
    bad.write_text('backend = "postgres"\n')
    with pytest.raises(ConfigError, match="backend: must be one of sqlite, kafka, memory"):
        load_config(LogSettings, bad, env={})
    with pytest.raises(ConfigError, match=r"log\.compact_every_appends"):
        open_log(LogSettings(backend="memory", compact_every_appends=-1))


def test_kafka_without_confluent_kafka_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "confluent_kafka" else real(name, *a),
    )
    with pytest.raises(MissingExtra, match=r"pip install 'pushjobs\[kafka\]'"):
        open_log(LogSettings(backend="kafka"))
