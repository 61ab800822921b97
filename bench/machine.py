"""Describe the machine a benchmark ran on, printed at the top of every benchmark."""

from __future__ import annotations

import os
import platform
import sys


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def describe() -> str:
    return (
        f"machine: {platform.node()} | {platform.system()} {platform.release()} "
        f"{platform.machine()} | {os.cpu_count()} CPUs ({_cpu_model()}) | {_memory_gib()} | "
        f"Python {sys.version.split()[0]} ({platform.python_implementation()})"
    )
