"""The memory backend and the pure modules: no I/O, and handles that share one store."""

from __future__ import annotations

import ast
from pathlib import Path

from pushjobs.log import checks, compaction, fold, leases, memory
from pushjobs.log.base import TopicPolicy
from pushjobs.log.memory import MemoryLog

IO_MODULES = {"os", "io", "sqlite3", "socket", "subprocess", "pathlib", "time"}


def _imports(path):
    names = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_memory_and_the_pure_modules_import_no_io():
    assert not _imports(memory.__file__) & IO_MODULES
    for pure in (checks, compaction, fold, leases):
        assert not _imports(pure.__file__) & (IO_MODULES | {"threading"}), pure.__name__


def test_each_log_has_its_own_store_unless_given_one():
    first = MemoryLog()
    first.create_topic("jobs", TopicPolicy())
    assert MemoryLog().topics() == []
    shared = MemoryLog(first.store)
    assert [t.name for t in shared.topics()] == ["jobs"]
    first.close()
    assert shared.append("jobs", "k", b"v") == 0  # closing one handle leaves the others
