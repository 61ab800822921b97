"""A consumer-group member of the sqlite log: one row of the ``leases`` table (see ``sqlite``),
and the ``roster`` of the groups over several topics (``roster_heartbeat``, ``shares``).

Theory of operation. ``leases`` holds one row per (group, topic): owner, the owner's
token, epoch, heartbeat and session timeout. ``poll`` runs ``leases.poll_lease`` inside
one write transaction of the member's log handle: renew, take over a released or expired
lease with epoch = the group's highest + 1 (``group_epoch``), or change nothing.
``close`` releases the row at once, so the next member's poll takes over without waiting
for a session timeout.

*Lease time is wall time* (``Clock.wall_ms``), compared across processes. Monotonic time
is shared by the processes of one boot, but the file outlives the boot: after a reboot a
stored monotonic heartbeat would look recent, or in the future, and a dead owner's lease
could last for days. Wall time can step; ``leases.lease_expired`` treats a heartbeat far
in the future as expired, so a step costs at most one fenced, hence harmless, change of
owner.

*Killed at any line.* Every change is one transaction, so the row is as before or after
it. A killed owner's row stays until its session timeout has passed (or until a member
on the owner's host sees its process gone, ``leases.process_of``), then the next poll
of another member takes it with a higher epoch. A restarted process is a new member (a
new token) even under the same member id: it gets a new epoch, never its old one.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from pushjobs.log import leases
from pushjobs.log.base import NamedMember
from pushjobs.log.shares import member_key
from pushjobs.log.sqlite.sqlite_file import ROSTER

if TYPE_CHECKING:
    from pushjobs.log.base import GroupMember
    from pushjobs.log.sqlite.sqlite_log import SqliteLog


def group_epoch(db: sqlite3.Connection, group: str) -> int:
    """The group's current epoch: the highest any of its leases ever had (0: none)."""
    (epoch,) = db.execute(
        "SELECT coalesce(max(epoch), 0) FROM leases WHERE grp = ?", (group,)
    ).fetchone()
    return int(epoch)


def roster_heartbeat(
    db: sqlite3.Connection, group: str, me: leases.Claimant, now_ms: int
) -> list[str]:
    """Renew ``me``'s roster row, drop the rows of members gone; the live members' keys.

    Called inside a write transaction. A row past its session, or of a process known to
    be gone, is deleted: its member, if it ever polls again, registers anew.
    """
    db.execute(ROSTER)
    db.execute(
        "INSERT OR REPLACE INTO roster (grp, token, member_id, heartbeat_ms, session_ms)"
        " VALUES (?, ?, ?, ?, ?)",
        (group, me.token, me.member_id, now_ms, me.session_ms),
    )
    rows = db.execute(
        "SELECT token, member_id, heartbeat_ms, session_ms FROM roster WHERE grp = ?", (group,)
    ).fetchall()
    live = []
    for token, member_id, heartbeat_ms, session_ms in rows:
        row = leases.Lease(member_id, token, 0, heartbeat_ms, session_ms)
        if leases.lease_expired(row, now_ms) or _gone(member_id):
            db.execute("DELETE FROM roster WHERE grp = ? AND token = ?", (group, token))
        else:
            live.append(member_key(member_id, token))
    return sorted(live)


def roster_leave(db: sqlite3.Connection, group: str, token: str) -> None:
    db.execute(ROSTER)
    db.execute("DELETE FROM roster WHERE grp = ? AND token = ?", (group, token))


def _gone(owner: str) -> bool:
    """Whether the lease holder ``owner`` is a process of this host that no longer runs.

    Only a member id naming this host and a PID can be judged; a zombie counts as gone. A
    PID reused by another process reads as alive, which only means waiting out the lease.
    """
    where = leases.process_of(owner)
    if where is None or where[0] != socket.gethostname() or where[1] == os.getpid():
        return False
    try:
        stat = Path(f"/proc/{where[1]}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


class SqliteMember(NamedMember):
    """A ``GroupMember`` holding a lease row (see the module docstring and ``leases``)."""

    def __init__(
        self, log: SqliteLog, group: str, topic: tuple[str, int], member_id: str, session_ms: int
    ) -> None:
        super().__init__(group, topic[0], member_id)
        self._log = log
        self._topic_id = topic[1]
        self._claimant = leases.Claimant(member_id, uuid.uuid4().hex, session_ms)
        self._open = True

    def poll(self) -> int | None:
        if not self._open:
            return None
        key = (self.group, self._topic_id)
        # Unsynced: durable with the next append (``sqlite_log``'s *Durability*).
        with self._log.transaction(
            f"polling group {self.group!r} on {self.topic}", synced=False
        ) as db:
            row = db.execute(
                "SELECT owner, token, epoch, heartbeat_ms, session_ms FROM leases"
                " WHERE grp = ? AND topic_id = ?",
                key,
            ).fetchone()
            held = None if row is None else leases.Lease(*row)
            lease = leases.poll_lease(
                held,
                self._claimant,
                group_epoch=group_epoch(db, self.group),
                now_ms=self._log.now_ms(),
                owner_gone=held is not None and held.owner is not None and _gone(held.owner),
            )
            if lease is None:
                return None
            db.execute(
                "INSERT OR REPLACE INTO leases"
                " (grp, topic_id, owner, token, epoch, heartbeat_ms, session_ms)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*key, lease.owner, lease.token, lease.epoch, lease.heartbeat_ms, lease.session_ms),
            )
            return lease.epoch

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        self._log.forget(self)
        if not self._log.is_open:
            return
        # Released at once: the next member's poll takes over without a session timeout.
        with self._log.transaction(
            f"leaving group {self.group!r} on {self.topic}", synced=False
        ) as db:
            db.execute(
                "UPDATE leases SET owner = NULL, token = NULL WHERE grp = ? AND topic_id = ?"
                " AND token = ?",
                (self.group, self._topic_id, self._claimant.token),
            )


if TYPE_CHECKING:
    _member: type[GroupMember] = SqliteMember
