"""The agent as a child subreaper: a job's orphans are reparented to it, not to init.

Theory of operation. A process whose parent exits is reparented to its nearest ancestor
that called ``prctl(PR_SET_CHILD_SUBREAPER, 1)``, or to init. The agent makes itself one
at start-up, so the middle process of a double fork leaving the job hands the daemon it
forked to the agent, where ``procscan`` finds it by ancestry even if it cleared its
environment. The agent reaps what it adopts (``procscan``): it never ``wait``s for a pid it
did not adopt, so ``subprocess`` keeps its own children's statuses. Linux only; elsewhere,
or where prctl refuses, ``become`` returns False and orphans go to init as before (the job's
marks still find them).

Killed at any line: nothing to undo; the attribute dies with the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_CHILD_SUBREAPER = 36


def become() -> bool:
    """Make this process a child subreaper; whether it is one now."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return False
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
