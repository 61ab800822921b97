"""A CPU quota without cgroups: processes stopped and continued so that they run a given
share of each tenth of a second (``bench/overload.py``, the overload test).

A 2-core machine cannot offer a Python server several times what it reads with simulators
that share its cores; a server made slower can be. SIGSTOP and SIGCONT need no privilege
over one's own children and no cgroup file system, and a stop of a tenth of a second is
shorter than any heartbeat interval, so the server is slow, not silent. A turn that needs
more than the share of a period spans several, and a server whose turn spans more than an
interval says it stalled, as it would under any quota.

Killed at any line: a process left stopped stays stopped (``__exit__`` continues each
one; a harness that dies first leaves that to its sandbox's stop, which kills by PID).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Sequence

PERIOD_S = 0.1


class Throttle:
    """While entered, ``pids`` run ``duty`` (0 to 1) of every ``PERIOD_S``."""

    def __init__(self, pids: Sequence[int], duty: float) -> None:
        if not 0 < duty < 1:
            raise ValueError("duty must lie between 0 and 1")
        self.pids, self.duty = list(pids), duty
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="throttle", daemon=True)

    def __enter__(self) -> Throttle:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):  # gone: nothing to stop
                os.kill(pid, sig)

    def _run(self) -> None:
        while not self._done.is_set():
            self._signal(signal.SIGCONT)
            self._done.wait(PERIOD_S * self.duty)
            self._signal(signal.SIGSTOP)
            self._done.wait(PERIOD_S * (1 - self.duty))
