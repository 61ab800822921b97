"""A group over several topics on the embedded backends (memory, sqlite): Kafka's group
protocol emulated with a roster of members and one lease per topic.

Theory of operation. Each backend keeps a *roster* per group: one row per member object
(its session token, member id, last heartbeat, session timeout), in the store or in the
file's ``roster`` table. ``EmulatedShare.poll()``:

1. heartbeats its roster row and reads the live members back (``Roster.heartbeat``; a
   member is live while ``leases.lease_expired`` says its row is not, and, on sqlite,
   while its process is not known to be gone);
2. computes the assignment of the group's topics over the live members
   (``assignor.assign``): every member computes the same one from the same roster;
3. releases the topics it holds that are no longer its own (``close`` of their lease:
   the new owner takes them at its next poll, without waiting for a session), and joins
   the lease of each topic newly its own, in group ``share_fence_group(group, topic)``;
4. polls every lease it holds and answers the topics whose lease it owns, with its epoch.

A topic therefore moves only once its previous owner released it or stopped polling for
a session (the lease is the single-topic member's, ``leases.poll_lease``), every topic
has its own epoch, and a deposed owner's fenced write is refused exactly as a deposed
leader's is. While two members' views of the roster differ (one just joined, one just
expired), both may want a topic: the lease lets one own it, and the next polls settle it.

Killed at any line: the roster row and the leases of a killed member stay until its
session timeout (or until a member on its host sees its process gone), then the others'
assignment no longer counts it and their polls take its topics with higher epochs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from pushjobs.log import assignor, leases
from pushjobs.log.base import Fence, GroupMember, share_fence_group


class Roster(Protocol):
    """What a backend provides for ``EmulatedShare``: the roster and single-topic leases."""

    def roster_heartbeat(self, group: str, me: leases.Claimant) -> list[str] | None:
        """Renew ``me``'s row; the live members' keys (``member_key``); None once closed."""
        ...

    def roster_leave(self, group: str, token: str) -> None: ...

    def forget_share(self, share: EmulatedShare) -> None: ...

    def batch(self, what: str, *, synced: bool = True) -> AbstractContextManager[None]:
        """The writes made inside as one (one transaction where the backend has them)."""
        ...

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> GroupMember: ...


def member_key(member_id: str, token: str) -> str:
    """How the assignment names a member object: two handles sharing an id are two members."""
    return f"{member_id}#{token}"


def live_keys(rows: Sequence[leases.Lease], now_ms: int) -> list[str]:
    """The keys of the roster rows still within their session (rows carry owner and token)."""
    return sorted(
        member_key(row.owner, row.token)
        for row in rows
        if row.owner is not None and row.token is not None and not leases.lease_expired(row, now_ms)
    )


class EmulatedShare:
    """A ``GroupShare`` of an embedded backend (see the module docstring)."""

    def __init__(
        self,
        roster: Roster,
        group: str,
        topics: Sequence[str],
        member_id: str,
        session_ms: int,
    ) -> None:
        self.group = group
        self.topics = tuple(dict.fromkeys(topics))
        self._roster = roster
        self._me = leases.Claimant(member_id, uuid.uuid4().hex, session_ms)
        self._key = member_key(member_id, self._me.token)
        self._leases: dict[str, GroupMember] = {}
        self._open = True

    def __repr__(self) -> str:
        return f"EmulatedShare({self.group!r}, {len(self.topics)} topics, {self.member_id!r})"

    @property
    def member_id(self) -> str:
        return self._me.member_id

    def poll(self) -> dict[str, Fence]:
        if not self._open:
            return {}
        # One transaction for the roster row and every lease: idle, a server's membership
        # was most of its disk writes (eight partitions, one fsync each, every renewal).
        with self._roster.batch(f"polling group {self.group!r}", synced=False):
            return self._poll()

    def _poll(self) -> dict[str, Fence]:
        live = self._roster.roster_heartbeat(self.group, self._me)
        if live is None:
            self._open = False
            return {}
        mine = assignor.owned_by(assignor.assign(self.topics, live), self._key)
        for topic in sorted(set(self._leases) - mine):
            self._leases.pop(topic).close()
        for topic in sorted(mine - set(self._leases)):
            self._leases[topic] = self._roster.member(
                share_fence_group(self.group, topic),
                topic,
                self._me.member_id,
                session_timeout_s=self._me.session_ms / 1000,
            )
        owned = {}
        for topic, lease in sorted(self._leases.items()):
            epoch = lease.poll()
            if epoch is not None:
                owned[topic] = Fence(share_fence_group(self.group, topic), epoch)
        return owned

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for lease in self._leases.values():
            lease.close()
        self._leases.clear()
        self._roster.forget_share(self)
        self._roster.roster_leave(self.group, self._me.token)
