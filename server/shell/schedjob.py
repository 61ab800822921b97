"""The job a schedule starts: ``job.start`` params checked once at ``schedule.add``, kept in
the schedule's record (secret values sealed), and made a ``JobRequest`` at each fire.

The checks are ``job.start``'s own (``jobparams.py``), so a schedule never holds a job that
``job.start`` would refuse; what depends on the fleet at the time (which nodes match, who
is online) is decided at each fire. Here: how the kept job is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.core.sealing import redacted


def shown(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job as the API shows it: secret values never."""
    return {**job, "options": redacted(job.get("options") or {})}
