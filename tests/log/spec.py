"""Open a log handle from a spec (a dict of strings): how child processes reach a test's log."""

from __future__ import annotations

from collections.abc import Mapping

from pushjobs.log.base import OrderedLog


def open_from_spec(spec: Mapping[str, str]) -> OrderedLog:
    backend = spec["backend"]
    if backend == "sqlite":
        from pushjobs.log.sqlite.sqlite_log import SqliteLog

        return SqliteLog(spec["path"])
    if backend == "kafka" and "namespace" in spec:  # a real broker: tests/log/broker_support.py
        from tests.log import broker_support

        return broker_support.open_log_from_spec(spec)
    if backend == "kafka":
        from tests.log import kafka_support

        return kafka_support.open_log_from_spec(spec)
    raise ValueError(f"no child process can open a {backend!r} log")
