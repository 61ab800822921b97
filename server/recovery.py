"""Bootstrap from the ordered log: the jobs a new leader takes over (DESIGN section 7).

Every job's latest snapshot is in ``assignments``; a start request in ``commands`` with no
snapshot means the previous leader died between accepting the request and starting it.
A snapshot that cannot be restored is reported, never silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from pushjobs.log.base import OrderedLog
from pushjobs.log.topics import TopicNames
from server.job import Job


@dataclass(slots=True)
class Recovered:
    jobs: list[tuple[Job, int]] = field(default_factory=list)  # (job, version)
    unstarted: list[dict[str, Any]] = field(default_factory=list)  # start requests
    damaged: list[str] = field(default_factory=list)  # "key: problem"


def recover(log: OrderedLog, topics: TopicNames) -> Recovered:
    out = Recovered()
    for key, record in log.latest(topics.assignments).items():
        try:
            assert record.value is not None
            snap = orjson.loads(record.value)
            out.jobs.append((Job.restore(snap), int(snap.get("version", 0))))
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AssertionError) as exc:
            out.damaged.append(f"{key}: {type(exc).__name__}: {exc}")
    known = {f"job:{job.job_id}" for job, _ in out.jobs}
    for key, record in log.latest(topics.commands).items():
        if key in known or record.value is None:
            continue
        try:
            request = orjson.loads(record.value)
        except orjson.JSONDecodeError as exc:
            out.damaged.append(f"{key}: {exc}")
            continue
        if isinstance(request, dict) and request.get("type") == "start":
            out.unstarted.append(request)
    out.jobs.sort(key=lambda pair: pair[0].created_ms)
    return out
