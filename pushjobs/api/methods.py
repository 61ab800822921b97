"""The API contract: every method, who may call it, what it takes and what it returns. Pure.

Transport. The CLI talks to the server's API socket (ROUTER, CurveZMQ server) from a
DEALER (CurveZMQ client) with one ``ApiRequest`` per call, signed with the user's Ed25519
identity key (header key id = the key's ``key_id``); the server answers one ``ApiReply``
with the same ``request_id``, signed with the server's Ed25519 key. The server checks the
signature against the key registry: the key must be an accepted ``user`` key whose role
allows the method (``admin`` > ``writer`` > ``reader``).

Methods, parameters (JSON object ``params``) and results (``result``):

    server.info   reader  {}
                  -> {server_id, incarnation, leader, started_ms, nodes_known, nodes_online,
                      jobs_active, drops: {socket: {reason: count}}}
    server.list   reader  {}
                  -> {servers: [{name, incarnation, role: leader|standby|deposed|gone,
                      epoch, last_pong_ms_ago, api, heartbeat, reply, partitions:
                      [topic...]}...]}  every server of the installation as the
                     ``control`` topic knows it, leader first; ``partitions``: the schedule
                     partitions it fires, as its latest record says ([] once it is stale)
    server.drain  admin   {edge, undo?: bool} -> {edge: EDGE (its server.info row, with
                     draining)}  no node is placed on the edge any more and its nodes are
                     asked to rediscover (again every 5 s while some stay); undo: placed
                     on again. The leader only (not_leader elsewhere); not_found for an
                     edge it does not know
    job.start     writer  {command, nodes: [selector...], quorum: "100%"|"3", timeout_s,
                           vote_timeout_s?, env: {K: V}, secret_env?: {K: V}, cwd?,
                           capture: bool, batch?: "3"|"25%", batch_wait_s?: float >= 0,
                           max_failures?: "2"|"20%", busy_wait_s?: float > 0,
                           offline_wait_s?: float > 0}
                  -> {job: JOB}   names must be [A-Za-z_][A-Za-z0-9_]*, each in one map
                     only; each node's env policy may still nack a name; a batch job's
                     JOB has batch: {window, wait_s, max_failures, failures}; with
                     busy_wait_s, JOB has gate_until_ms (not null while it waits for busy
                     nodes) and busy_wait_ms; with offline_wait_s, nodes offline at
                     start are ``offline`` until JOB.offline_until_ms (each gets its
                     commit when it comes back), then ``unavailable``; a job the server's
                     policy holds comes back
                     ``awaiting_approval``, JOB.approval {rule, expires_ms, requester};
                     one it forbids (a bare ``*``) is refused ``unauthorized``
    job.list      reader  {state?: str, limit: 50, offset: 0}
                  -> {jobs: [JOB without "nodes"], total}   newest first
    job.status    reader  {job_id} -> {job: JOB}
    job.watch     reader  {job_id, version: int, wait_s: float <= 30}
                  -> {job: JOB}  as soon as the job's version is above ``version``, or
                     when ``wait_s`` passes (then the same version comes back); a
                     long poll the CLI repeats for a live view
    job.output    reader  {job_id, node}
                  -> {job_id, node, exit_status, stdout, stderr, stdout_truncated,
                      stderr_truncated}
    job.abort     writer  {job_id} -> {job: JOB}   a job awaiting approval too (withdrawn)
    job.approve   admin   {job_id, reason?: str} -> {job: JOB}   a job ``awaiting_approval``
                     (the server's ``[policy]``) begins its vote; ``unauthorized`` for the
                     job's own requester (another admin must approve), ``conflict`` for a
                     job not awaiting approval
    job.reject    admin   {job_id, reason: str} -> {job: JOB}   it ends ``rejected``, no node
                     asked; any admin, the requester too; ``conflict`` as above
    node.list     reader  {} -> {nodes: [NODE...]}
    node.status   reader  {nodes: [name...]} -> {nodes: [NODE...]}  (NotFound if unknown)
    key.list      admin   {state?, pattern?} -> {keys: [ENTRY...]}
    key.show      admin   {name} -> {key: ENTRY, denied: [ENTRY...]}
    key.accept    admin   {names: [NAME or GLOB...]} or {all: true} -> {results: [RESULT...]}
    key.reject    admin   {names: [NAME or GLOB...]} -> {results: [RESULT...]}
    key.delete    admin   {names: [NAME or GLOB...]} -> {results: [RESULT...]}
    key.add       admin   {name, kind, ed25519_public, curve_public, role?, accept?}
                          -> {key: ENTRY}
    key.role      admin   {name, role} -> {key: ENTRY}
    schedule.add      writer  {every job.start param, one of at: ISO 8601 | in_s: float |
                               cron: "m h dom mon dow" (a seconds field may lead), tz?:
                               "Europe/Berlin", catch_up?: skip|once|all, overlap?:
                               skip|queue|allow} -> {schedule: SCHEDULE}
    schedule.list     reader  {} -> {schedules: [SCHEDULE...]}
    schedule.show     reader  {schedule_id} -> {schedule: SCHEDULE}
    schedule.pause    writer  {schedule_id} -> {schedule: SCHEDULE}
    schedule.resume   writer  {schedule_id} -> {schedule: SCHEDULE}   due times that fell
                              while paused are not fired
    schedule.delete   writer  {schedule_id} -> {deleted, command}
    schedule.history  reader  {schedule_id} -> {schedule_id, fires: [{due_ms, job_id,
                              outcome, job_state}...]}   the latest fires, oldest first

    SCHEDULE = {schedule_id, command, nodes, job (the job.start params, secrets redacted),
                trigger {at_ms} or {cron, tz}, when, catch_up, overlap, paused,
                next_due_ms, consumed_ms, last_fire {due_ms, job_id}, created_ms,
                created_by, partition (its topic), owner ("name:incarnation" of the server
                firing that partition, null while no live server says it owns it)}

    RESULT: {name, ok, previous, state} or {name, ok: false, error, code?: "not_found"}

    JOB  = the job snapshot of ``Job.snapshot()`` (server/core/snapshot.py) plus ``version``
           (an int that grows with every change of the job): job_id, command, state, quorum,
           run_timeout_ms, created_ms, started_ms, finished_ms, summary {state: count},
           options {env, secret_env: {K: "<secret>"}, cwd, capture}: a secret's value is
           never returned, sealed or not; approval (null unless the policy held the job)
           {rule, expires_ms, requester, decision?: approved|rejected|expired,
           decided_by, decided_ms, reason}; nodes {name: {state, exit_status, reason,
           changed_ms, ...}}
    NODE = {name, key_state, online, command_endpoint, incarnation, job_id, job_state,
            last_seen_ms_ago, facts, tags}

Errors come back as ``ok: false`` with ``error.code`` one of ``CODES``; the client raises
the matching ``ApiError`` subclass (``error_for``). ``job.*`` and ``node.*`` methods need
the leader (a standby serves no node): a standing-by server answers ``not_leader`` with
``error.leader``, the leader's API endpoint when it knows one (the client follows it,
``pushjobs.api.client``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pushjobs.errors import ApiError, NotFound, Unauthorized

ROLE_RANK: Final = {"reader": 0, "writer": 1, "admin": 2}

METHODS: Final[Mapping[str, str]] = {
    "server.info": "reader",
    "server.list": "reader",
    "server.drain": "admin",
    "job.start": "writer",
    "job.list": "reader",
    "job.status": "reader",
    "job.watch": "reader",
    "job.output": "reader",
    "job.abort": "writer",
    "job.approve": "admin",
    "job.reject": "admin",
    "node.list": "reader",
    "node.status": "reader",
    "key.list": "admin",
    "key.accept": "admin",
    "key.reject": "admin",
    "key.delete": "admin",
    "key.show": "admin",
    "key.add": "admin",
    "key.role": "admin",
    "schedule.add": "writer",
    "schedule.list": "reader",
    "schedule.show": "reader",
    "schedule.pause": "writer",
    "schedule.resume": "writer",
    "schedule.delete": "writer",
    "schedule.history": "reader",
}
"""Method name -> the least role allowed to call it."""

MAX_WATCH_S: Final = 30.0

BAD_REQUEST: Final = "bad_request"
UNAUTHORIZED: Final = "unauthorized"
NOT_FOUND: Final = "not_found"
NOT_LEADER: Final = "not_leader"
CONFLICT: Final = "conflict"
BUSY: Final = "busy"  # a per-client or server-wide cap is reached: retry later
INTERNAL: Final = "internal"
CODES: Final = frozenset(
    {BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, NOT_LEADER, CONFLICT, BUSY, INTERNAL}
)


def allowed(role: str | None, method: str) -> bool:
    """Whether a user with ``role`` may call ``method`` (unknown methods: nobody)."""
    needed = METHODS.get(method)
    if needed is None or role is None:
        return False
    return ROLE_RANK.get(role, -1) >= ROLE_RANK[needed]


def error_for(code: str, message: str) -> ApiError:
    """The exception a client raises for an error reply."""
    if code == UNAUTHORIZED:
        return Unauthorized(message)
    if code == NOT_FOUND:
        return NotFound(message)
    return ApiError(message, code=code)
