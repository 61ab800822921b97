"""The server half of each API method (see ``pushjobs.api.methods`` for the contract).

A handler validates its params, acts through the ``Backend`` the daemon provides, and
returns the JSON result or raises ``ApiError``; ``job.watch`` may instead return
``WATCH`` to be answered later. Role checks happen before a handler is called.

``job.start`` refuses a variable name that no agent would accept (the agents' env
policies decide the rest) and seals ``secret_env`` values before anything keeps them:
from here on they exist in clear only inside the commit sent to a node.

What one user key may make the server hold and write is bounded before its params are
read: ``job.start`` is refused ``busy`` while the key has ``max_active_jobs_per_caller``
jobs not finished, and ``job.start``, ``schedule.add``, ``schedule.pause`` and
``schedule.resume`` together past a token bucket per key (``quotas.py``), with the seconds
to wait. Admin keys are not bounded: an admin can
make new keys at will, so a bound per admin key would bound nothing, and an admin must be
able to act in an incident. A schedule's fires do not come through here (``scheduler.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from keys.registry import KeyRegistry
from pushjobs.api import methods
from pushjobs.clock import Clock
from pushjobs.errors import ApiError, KeyFileError, NotFound, PushJobsError, TargetError
from pushjobs.protocol.framing import Limits
from pushjobs.states import JobState
from server.core.coordinator import Coordinator
from server.core.jobparams import JobRequest, _names, _str, bad, job_params, job_request
from server.core.nodetable import NodeTable
from server.core.quotas import RateQuota
from server.core.sealing import SecretBox
from server.front.keymethods import KeyAdmin
from server.front.schedmethods import SchedAdmin
from server.shell.serverconfig import JobSettings

WATCH: Final = object()
"""A handler's answer meaning: park this request until the job changes or time passes."""
MAX_DECISION_REASON: Final = 500
"""An approval's or rejection's reason, at most (kept in the job and in its events)."""
RATED: Final = frozenset({"job.start", "schedule.add", "schedule.pause", "schedule.resume"})
"""The methods that take a token from the caller's bucket: each makes the server write."""


class Sealer(Protocol):
    @property
    def secrets(self) -> SecretBox | None: ...

    @property
    def limits(self) -> Limits: ...


class JobEffects(Protocol):
    @property
    def sender(self) -> Sealer: ...

    @property
    def settings(self) -> JobSettings: ...


class Backend(Protocol):
    nodes: NodeTable
    registry: KeyRegistry
    clock: Clock
    api_drops: dict[str, int]

    @property
    def jobs(self) -> JobEffects:
        """Job effects, whose command sender holds the key secrets are sealed with."""
        ...

    @property
    def coordinator(self) -> Coordinator: ...

    def info(self) -> dict[str, Any]: ...

    def servers(self) -> list[dict[str, Any]]:
        """Every server of the installation from the control topic (``membership.py``)."""
        ...

    def start_job(self, request: JobRequest, caller: str) -> str: ...

    def abort_job(self, job_id: str, caller: str) -> None: ...

    def decide_job(self, job_id: str, caller: str, *, approve: bool, reason: str) -> None:
        """Approve or reject a job awaiting approval (``Jobs.decide``)."""
        ...

    def node_row(self, name: str) -> dict[str, Any] | None: ...

    def node_names(self) -> list[str]: ...

    def find_output(self, job_id: str, node: str) -> dict[str, Any] | None: ...

    def drain_edge(self, edge: str, undo: bool, caller: str) -> dict[str, Any]:
        """Drain ``edge`` (``undo``: place on it again); its status row."""
        ...


def _with_nodes(params: Mapping[str, Any]) -> bool:
    """``nodes: false`` asks for the job's summary without its per-node table."""
    value = params.get("nodes", True)
    if not isinstance(value, bool):
        raise bad("'nodes' must be true or false")
    return value


class ApiHandlers:
    def __init__(self, backend: Backend, secrets: SecretBox | None = None) -> None:
        self.b = backend
        self.secrets = secrets if secrets is not None else backend.jobs.sender.secrets
        settings = backend.jobs.settings
        self.starts = RateQuota(
            settings.job_starts_per_minute_per_caller, settings.job_start_burst_per_caller
        )
        self.table: dict[str, Callable[[Mapping[str, Any], str], Any]] = {
            "server.info": lambda p, c: self.b.info(),
            "server.list": lambda p, c: {"servers": self.b.servers()},
            "server.drain": self.server_drain,
            "job.start": self.job_start,
            "job.list": self.job_list,
            "job.status": self.job_status,
            "job.watch": self.job_watch,
            "job.output": self.job_output,
            "job.abort": self.job_abort,
            "job.approve": self.job_approve,
            "job.reject": self.job_reject,
            "node.list": self.node_list,
            "node.status": self.node_status,
            **KeyAdmin(self.b).table(),
            **SchedAdmin(self.b, self._fire_budget).table(),
        }

    def server_drain(self, params: Mapping[str, Any], caller: str) -> Any:
        edge = params.get("edge")
        undo = params.get("undo", False)
        if not isinstance(edge, str) or not edge:
            raise bad("'edge' must name an edge (pushjobs server status lists them)")
        if not isinstance(undo, bool):
            raise bad("'undo' must be true or false")
        return {"edge": self.b.drain_edge(edge, undo, caller)}

    def handle(self, method: str, params: Mapping[str, Any], caller: str) -> Any:
        handler = self.table.get(method)
        if handler is None:
            raise bad(f"unknown method {method!r}")
        bounded = method in RATED and not self._is_admin(caller)
        try:
            if bounded:
                self._within_bounds(method, caller)
            return handler(params, caller)
        except ApiError as exc:
            if bounded and exc.code == methods.BUSY:  # a writer past its bounds: counted
                self.b.api_drops["writer_bounds"] += 1
            raise
        except TargetError as exc:
            raise bad(str(exc)) from None
        except KeyFileError as exc:
            code = methods.NOT_FOUND if "no key named" in str(exc) else methods.CONFLICT
            raise ApiError(str(exc), code=code) from None
        except PushJobsError as exc:
            raise ApiError(str(exc), code=methods.INTERNAL) from None

    # --- per-caller bounds ------------------------------------------------------------------

    def _is_admin(self, caller: str) -> bool:
        entry = self.b.registry.find(caller)
        return entry is not None and entry.role == "admin"

    def _fire_budget(self, caller: str) -> float | None:
        """How often ``caller``'s schedules may fire a minute, all told (None: an admin)."""
        if self._is_admin(caller):
            return None
        return self.b.jobs.settings.schedule_fires_per_minute_per_caller

    def _within_bounds(self, method: str, caller: str) -> None:
        """Refuse (``busy``, nothing changed) what would take ``caller`` past its bounds."""
        settings = self.b.jobs.settings
        limit = settings.max_active_jobs_per_caller
        unfinished = self.b.coordinator.unfinished_by(caller) if method == "job.start" else 0
        if unfinished >= limit:
            raise ApiError(
                f"{caller} has {unfinished} jobs not finished; one key may have {limit} "
                "(jobs.max_active_jobs_per_caller): wait for one to end, or abort one",
                code=methods.BUSY,
            )
        wait_ms = self.starts.take(caller, round(self.b.clock.monotonic() * 1000))
        if wait_ms:
            retry_s = math.ceil(wait_ms / 100) / 10  # rounded up: retrying then succeeds
            raise ApiError(
                f"{caller} is over its limit of {settings.job_starts_per_minute_per_caller:g} "
                f"job starts and schedule adds a minute, after a burst of "
                f"{settings.job_start_burst_per_caller} (jobs.job_starts_per_minute_per_caller, "
                f"jobs.job_start_burst_per_caller): retry in {retry_s:.1f} s",
                code=methods.BUSY,
            )

    # --- jobs -----------------------------------------------------------------------------

    def job_start(self, params: Mapping[str, Any], caller: str) -> Any:
        limit = self.b.jobs.sender.limits.max_body_bytes
        request = job_request(job_params(params, self.secrets, limit))
        job_id = self.b.start_job(request, caller)
        return {"job": self.b.coordinator.view(job_id)}

    def _job_id(self, params: Mapping[str, Any]) -> str:
        job_id = _str(params, "job_id")
        if job_id not in self.b.coordinator.jobs:
            raise NotFound(f"no job {job_id!r}")
        return job_id

    def job_list(self, params: Mapping[str, Any], caller: str) -> Any:
        state = params.get("state")
        if state is not None and state not in {s.value for s in JobState}:
            raise bad(f"unknown job state {state!r}")
        limit, offset = params.get("limit", 50), params.get("offset", 0)
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 1 or offset < 0:
            raise bad("'limit' must be >= 1 and 'offset' >= 0")
        coord = self.b.coordinator
        # Jobs are kept in creation order (recovery restores them so): newest first.
        jobs = [j for j in reversed(coord.jobs.values()) if state is None or j.state.value == state]
        rows = [coord.view(job.job_id, nodes=False) for job in jobs[offset : offset + limit]]
        return {"jobs": rows, "total": len(jobs)}

    def job_status(self, params: Mapping[str, Any], caller: str) -> Any:
        return {"job": self.b.coordinator.view(self._job_id(params), nodes=_with_nodes(params))}

    def job_watch(self, params: Mapping[str, Any], caller: str) -> Any:
        job_id = self._job_id(params)
        version = params.get("version", -1)
        wait_s = params.get("wait_s", 10.0)
        if not isinstance(version, int):
            raise bad("'version' must be an integer")
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or wait_s < 0:
            raise bad("'wait_s' must be a number >= 0")
        if self.b.coordinator.versions.get(job_id, 0) > version or wait_s == 0:
            return {"job": self.b.coordinator.view(job_id, nodes=_with_nodes(params))}
        return WATCH

    def job_output(self, params: Mapping[str, Any], caller: str) -> Any:
        job_id = self._job_id(params)
        node = _str(params, "node")
        if node not in self.b.coordinator.jobs[job_id].nodes:
            raise NotFound(f"{node} is not a target of job {job_id}")
        found = self.b.find_output(job_id, node)
        if found is None:
            raise NotFound(f"no output from {node} for job {job_id} (was it run with --capture?)")
        return found

    def job_abort(self, params: Mapping[str, Any], caller: str) -> Any:
        job_id = self._job_id(params)
        if self.b.coordinator.jobs[job_id].finished:
            raise ApiError(
                f"job {job_id} has already ended ({self.b.coordinator.jobs[job_id].state})",
                code=methods.CONFLICT,
            )
        self.b.abort_job(job_id, caller)
        return {"job": self.b.coordinator.view(job_id)}

    def job_approve(self, params: Mapping[str, Any], caller: str) -> Any:
        return self._decide(params, caller, approve=True)

    def job_reject(self, params: Mapping[str, Any], caller: str) -> Any:
        return self._decide(params, caller, approve=False)

    def _decide(self, params: Mapping[str, Any], caller: str, *, approve: bool) -> Any:
        job_id = self._job_id(params)
        reason = params.get("reason", "")
        if not isinstance(reason, str) or len(reason) > MAX_DECISION_REASON:
            raise bad(f"'reason' must be a string of at most {MAX_DECISION_REASON} characters")
        if not approve and not reason.strip():
            raise bad("a rejection needs a reason (--reason): the requester is told it")
        self.b.decide_job(job_id, caller, approve=approve, reason=reason.strip())
        return {"job": self.b.coordinator.view(job_id)}

    # --- nodes and keys ---------------------------------------------------------------------

    def node_list(self, params: Mapping[str, Any], caller: str) -> Any:
        rows = [self.b.node_row(name) for name in self.b.node_names()]
        return {"nodes": [r for r in rows if r is not None]}

    def node_status(self, params: Mapping[str, Any], caller: str) -> Any:
        rows = []
        for name in _names(params, "nodes"):
            row = self.b.node_row(name)
            if row is None:
                raise NotFound(f"no node named {name!r}")
            rows.append(row)
        return {"nodes": rows}
