"""Bootstrap from the ordered log: the jobs a new leader takes over.

Every job's latest snapshot is in ``assignments``; a start request in ``commands`` with no
snapshot means the previous leader died between accepting the request and starting it.
A snapshot that cannot be restored is reported, never silently skipped. An approval or a
rejection of a held job (``job:<id>/approval``) is handed on by job id (``decisions``):
the new leader acts on it if the job's snapshot still shows it held (``leaderjobs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from pushjobs.log.base import OrderedLog
from pushjobs.log.topics import TopicNames
from server.core.job import Job
from server.core.records import CHUNK_KEY, DECISION_KEY, TARGETS_KEY


@dataclass(slots=True)
class Recovered:
    jobs: list[tuple[Job, int]] = field(default_factory=list)  # (job, version)
    unstarted: list[dict[str, Any]] = field(default_factory=list)  # start requests
    damaged: list[str] = field(default_factory=list)  # "key: problem"
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)  # job id -> decision


def recover(log: OrderedLog, topics: TopicNames) -> Recovered:
    out = Recovered()
    headers: dict[str, bytes] = {}
    chunks: dict[str, dict[int, bytes]] = {}
    for key, record in log.latest(topics.assignments).items():
        if record.value is None:
            continue
        base, sep, index = key.partition(CHUNK_KEY)
        if not sep:
            headers[key] = record.value
        elif index.isdigit():
            chunks.setdefault(base, {})[int(index)] = record.value
        else:
            out.damaged.append(f"{key}: not a snapshot key")
    for key, value in headers.items():
        try:
            snap = orjson.loads(value)
            if "nodes" not in snap:  # chunked: put the node table back together
                parts = chunks.get(key, {})
                missing = [i for i in range(int(snap["chunks"])) if i not in parts]
                if missing:
                    raise KeyError(f"node chunks {missing[:5]} missing")
                nodes: dict[str, Any] = {}
                for i in range(int(snap["chunks"])):
                    nodes.update(orjson.loads(parts[i])["nodes"])
                snap["nodes"] = nodes
            out.jobs.append((Job.restore(snap), int(snap.get("version", 0))))
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            out.damaged.append(f"{key}: {type(exc).__name__}: {exc}")
    known = {f"job:{job.job_id}" for job, _ in out.jobs}
    requests: dict[str, bytes] = {}
    targets: dict[str, dict[int, bytes]] = {}
    for key, record in log.latest(topics.commands).items():
        if key.endswith(DECISION_KEY):
            _decision(out, key, record.value)
            continue
        base, sep, index = key.partition(TARGETS_KEY)
        if base in known or record.value is None:
            continue
        if not sep:
            requests[key] = record.value
        elif index.isdigit():
            targets.setdefault(base, {})[int(index)] = record.value
    for key, value in requests.items():
        try:
            request = orjson.loads(value)
            if isinstance(request, dict) and "target_chunks" in request:
                # A large request's targets, in the records written before it.
                parts = targets.get(key, {})
                count = int(request.pop("target_chunks"))
                missing = [i for i in range(count) if i not in parts]
                if missing:
                    raise KeyError(f"target chunks {missing[:5]} missing")
                request["targets"] = [n for i in range(count) for n in orjson.loads(parts[i])]
        except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            out.damaged.append(f"{key}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(request, dict) and request.get("type") == "start":
            out.unstarted.append(request)
    out.jobs.sort(key=lambda pair: pair[0].created_ms)
    return out


def _decision(out: Recovered, key: str, value: bytes | None) -> None:
    """A held job's approval or rejection, for the job's id."""
    if value is None:
        return
    try:
        decision = orjson.loads(value)
        out.decisions[str(decision["job_id"])] = dict(decision)
    except (orjson.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
        out.damaged.append(f"{key}: {type(exc).__name__}: {exc}")
