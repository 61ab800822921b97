"""Group leases: how the embedded backends (memory, sqlite) decide who owns a topic.

Pure: no I/O, no clock. Both backends call ``poll_lease`` inside their critical section
(a lock, a write transaction) and store what it returns, so the two agree on every edge
case the conformance suite pins.

A lease is the ownership of one (group, topic). ``poll`` either renews the caller's own
lease, takes over a lease that is released or expired, or changes nothing. A lease is
tied to one member *object* (its ``token``), not to its member id: a process that
restarts with the same id is a new owner and gets a new epoch, so two live handles that
share an id can never share an epoch. Each change of owner raises the group's epoch to
one more than the highest it ever had, so epochs only grow.

A member id may end in ``@HOST/PID`` (``process_of``): the process holding the lease. A
claimant on that host that finds the process gone (``owner_gone``, decided by the backend,
which may look) takes the lease at once instead of waiting out a dead owner's session.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Lease:
    owner: str | None  # member id; None once released
    token: str | None  # the owning member object's session token
    epoch: int
    heartbeat_ms: int
    session_ms: int


@dataclass(frozen=True, slots=True)
class Claimant:
    """One member object as leases know it: its id, its session token, its session timeout."""

    member_id: str
    token: str
    session_ms: int


def lease_expired(lease: Lease, now_ms: int) -> bool:
    """Released, or no heartbeat within the owner's session timeout.

    Wall time can step. A heartbeat further in the *future* than a session timeout means
    the clock went back: the lease counts as expired, so a step costs at most one
    (fenced, hence safe) change of owner and never leaves a dead owner's lease stuck.
    """
    if lease.owner is None:
        return True
    return abs(now_ms - lease.heartbeat_ms) > lease.session_ms


def process_of(member_id: str) -> tuple[str, int] | None:
    """(host, pid) of a member id ending in ``@HOST/PID``; None for any other id."""
    _, at, where = member_id.rpartition("@")
    host, slash, pid = where.partition("/")
    if not at or not slash or not host or not pid.isdigit():
        return None
    return host, int(pid)


def poll_lease(
    lease: Lease | None,
    claimant: Claimant,
    *,
    group_epoch: int,
    now_ms: int,
    owner_gone: bool = False,
) -> Lease | None:
    """The lease after a poll by ``claimant``; None if another member holds it (no change).

    ``owner_gone``: the holder's process is known to be dead; its lease is taken at once.
    """
    if lease is not None and lease.owner is not None and lease.token == claimant.token:
        return replace(lease, heartbeat_ms=now_ms, session_ms=claimant.session_ms)
    if lease is None or lease_expired(lease, now_ms) or owner_gone:
        return Lease(
            claimant.member_id, claimant.token, group_epoch + 1, now_ms, claimant.session_ms
        )
    return None
