"""Admission: what the server records about keys it does not know, and how much of it.

Theory of operation. Anyone holding the server's public CurveZMQ key (it is public) can
send a config request under a fresh self-signed identity. Each one used to cost a whole
rewrite of the registry file, fsyncs included, inside the server loop, and an entry that
stayed forever. Here:

- keys the registry already knows cost nothing (``KeyRegistry.known``, no write);
- a new key is *queued*, answered at once with the state it will get, and written with
  every other key queued since, in one registry write: at the end of the turn when a
  node was auto-accepted (its reply-channel ZAP check reads the registry), at most once per
  ``FLUSH_EVERY_S`` otherwise;
- new pending keys are capped in total (``max_pending_keys``, counting the registry's)
  and per network source (``max_pending_per_source``); one over a cap is ``refused``:
  not recorded, and told why;
- another key under a registered name is folded into the name's one ``denied`` entry by
  the registry, so impostor keys cannot grow it either.

Killed at any line: queued keys not yet written are lost; their agents were told
``pending`` or ``denied`` (nothing that admits them) and ask again, and are recorded
then. An auto-accepted key is written before the reply that admits it leaves the server.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from keys.entry import Entry
from keys.identity import PublicIdentity
from keys.keystates import KeyState
from keys.registry import KeyRegistry, Presented
from pushjobs.errors import KeyFileError

log = logging.getLogger("pushjobs.server")

FLUSH_EVERY_S: Final = 1.0
REFUSALS_LOGGED_EVERY_S: Final = 10.0  # a flood of refusals must not flood the log


@dataclass(frozen=True, slots=True)
class Refused:
    """A key not recorded, and why (told to the agent)."""

    reason: str


class Admission:
    def __init__(
        self,
        registry: KeyRegistry,
        *,
        auto_accept: bool,
        max_pending: int,
        max_per_source: int,
    ) -> None:
        self.registry = registry
        self.auto_accept = auto_accept
        self.max_pending = max_pending
        self.max_per_source = max_per_source
        # New names (pending or auto-accepted) by their keys, and impostor attempts folded
        # per name (the last keys, how many): both bounded, whatever a stranger sends.
        self.new: dict[tuple[str, str, str], Presented] = {}
        self.new_names: dict[str, KeyState] = {}
        self.denied: dict[str, Presented] = {}
        self.by_source: dict[str, set[str]] = {}  # names this server queued as pending
        self.refused = 0
        self.writes = 0
        self.failed_writes = 0
        self._urgent = False
        self._next_flush = 0.0
        self._next_refusal_log = 0.0
        self._seen: tuple[Entry, ...] | None = None
        self._pending: set[str] = set()
        self._queued_pending = 0

    @property
    def queued(self) -> int:
        return len(self.new) + len(self.denied)

    def decide(self, public: PublicIdentity, source: str, now: float) -> KeyState | Refused:
        """The state of these keys, queuing them if new; Refused when over a cap."""
        known = self.registry.known(public)
        if known is not None:
            return known
        key = (public.name, public.fingerprint, public.curve_public)
        if key in self.new:
            return self.new_names[public.name]
        if self.registry.find(public.name) is not None or public.name in self.new_names:
            folded = self.denied.get(public.name)
            tries = 1 if folded is None else folded.attempts + 1
            self.denied[public.name] = Presented(public, attempts=tries)
            return KeyState.DENIED
        if self.auto_accept:
            self._urgent = True
            return self._queue(key, public, KeyState.ACCEPTED)
        pending = self._pending_count()
        if pending >= self.max_pending:
            return self._refuse(
                now,
                f"enrolment is full: {pending} keys are pending (server.max_pending_keys); "
                "an admin must accept, reject or delete some first",
            )
        mine = self.by_source.setdefault(source, set())
        if len(mine) >= self.max_per_source:
            # Only names still pending count: accepted, rejected or deleted ones free a slot.
            mine.intersection_update(self._pending | set(self.new_names))
        if len(mine) >= self.max_per_source:
            return self._refuse(
                now,
                f"enrolment is full for {source or 'this address'}: {len(mine)} keys from it "
                "are pending (server.max_pending_per_source)",
            )
        mine.add(public.name)
        return self._queue(key, public, KeyState.PENDING)

    def next_flush(self) -> float | None:
        """When ``flush`` writes what is queued (monotonic), None with nothing queued."""
        return self._next_flush if self.queued else None  # an urgent one: this very turn

    def flush(self, now: float, *, force: bool = False) -> None:
        """Write what is queued if it is due: at once for an admitted node, else at most
        once per ``FLUSH_EVERY_S``."""
        if not self.queued or not (force or self._urgent or now >= self._next_flush):
            return
        batch = [*self.new.values(), *self.denied.values()]
        self.new.clear()
        self.new_names.clear()
        self.denied.clear()
        self._queued_pending = 0
        self._urgent = False
        self._next_flush = now + FLUSH_EVERY_S
        try:
            self.registry.record(batch)
        except KeyFileError as exc:
            # The agents were told pending or denied, nothing that admits them: they ask
            # again and are recorded once the registry can be written.
            self.failed_writes += 1
            log.error("registry: %d new key(s) not recorded: %s", len(batch), exc)
            return
        self.writes += 1
        log.info("registry: %d new key(s) or attempts recorded in one write", len(batch))

    def _queue(
        self, key: tuple[str, str, str], public: PublicIdentity, state: KeyState
    ) -> KeyState:
        self.new[key] = Presented(public, auto_accept=state is KeyState.ACCEPTED)
        self.new_names[public.name] = state
        self._queued_pending += state is KeyState.PENDING
        return state

    def _refuse(self, now: float, reason: str) -> Refused:
        self.refused += 1
        if now >= self._next_refusal_log:
            self._next_refusal_log = now + REFUSALS_LOGGED_EVERY_S
            log.warning("enrolment refused (%d so far): %s", self.refused, reason)
        return Refused(reason)

    def _pending_count(self) -> int:
        entries = self.registry.entries()
        if entries is not self._seen:
            self._seen = entries
            self._pending = {e.name for e in entries if e.state is KeyState.PENDING}
        return len(self._pending) + self._queued_pending
