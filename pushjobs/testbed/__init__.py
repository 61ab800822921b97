"""A whole installation on one machine, and the tools that try it: the sandbox (used by
``pushjobs quickstart``, the tests and the benchmarks), child processes, simulated keys,
and the chaos harness (tests and ``bench/chaos.py``)."""
