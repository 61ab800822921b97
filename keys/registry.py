"""The key registry: which identities the server knows, and in what state (see ``states``).

``present`` is what the server calls when a node shows up:

- an unknown name becomes a new ``pending`` entry (``accepted`` with auto-accept);
- a known name with its own keys gets its current state, and nothing changes;
- a known name with other keys is recorded once as a separate ``denied`` entry (keyed by
  name and keys), the name's entry is left exactly as it was, and ``denied`` is returned.

"The keys" are the Ed25519 and the CurveZMQ public key together: the node talks over
CurveZMQ, so a known Ed25519 key with a new CurveZMQ key is not the same identity.

Each name has at most one main (not denied) entry; ``get``, ``accept``, ``reject`` and
``set_role`` act on it, ``delete`` removes every entry of the name. A batch is all or
nothing. Times come from ``now_ms`` when given, else from the registry's clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from keys.entry import ROLES, Entry, check_role
from keys.identity import PublicIdentity, check_kind
from keys.states import TRANSITIONS, Action, KeyState, transition
from keys.store import RegistryFile
from pushjobs.clock import Clock, SystemClock
from pushjobs.errors import KeyFileError, KeyStateError, UnknownIdentity

__all__ = ["ROLES", "TRANSITIONS", "Action", "Entry", "KeyRegistry", "KeyState", "transition"]

Entries = list[Entry]  # the method ``list`` below would shadow the builtin in annotations


class KeyRegistry:
    def __init__(self, path: Path, *, clock: Clock | None = None) -> None:
        self.path = path
        self._file = RegistryFile(path)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._indexed: tuple[Entry, ...] | None = None
        self._by_name: dict[str, Entry] = {}
        self._by_curve: dict[str, Entry] = {}
        self._file.read()  # a corrupt registry fails at startup, not at the first node

    def _index(self) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """Main entries by name and by CurveZMQ key, rebuilt only when the file changed.

        A server of 50,000 nodes looks names up on every config request and revocation
        check: a scan per lookup would be O(n^2) over an enrolment wave.
        """
        entries = self._file.read()
        if entries is not self._indexed:
            main = [e for e in entries if e.state is not KeyState.DENIED]
            by_name: dict[str, Entry] = {}
            by_curve: dict[str, Entry] = {}
            for entry in main:
                by_name.setdefault(entry.name, entry)
                by_curve.setdefault(entry.curve_public, entry)
            self._by_name, self._by_curve, self._indexed = by_name, by_curve, entries
        return self._by_name, self._by_curve

    def _now(self, now_ms: int | None) -> int:
        return self._clock.wall_ms() if now_ms is None else now_ms

    # --- reading ------------------------------------------------------------------------

    def list(self, state: KeyState | str | None = None) -> Entries:
        entries = self._file.read()
        if state is None:
            return list(entries)
        try:
            wanted = KeyState(state)
        except ValueError:
            raise KeyFileError(f"unknown key state {state!r}") from None
        return [e for e in entries if e.state is wanted]

    def entries(self) -> tuple[Entry, ...]:
        """Every entry; the same tuple object until the file changes (cheap to cache on)."""
        return self._file.read()

    def get(self, name: str) -> Entry:
        """The name's main (not denied) entry."""
        entry = self.find(name)
        if entry is None:
            raise UnknownIdentity(f"no key named {name!r} in {self.path}")
        return entry

    def find(self, name: str) -> Entry | None:
        return self._index()[0].get(name)

    def is_authorized(self, name: str, fingerprint: str) -> bool:
        entry = self.find(name)
        return (
            entry is not None
            and entry.state is KeyState.ACCEPTED
            and entry.fingerprint == fingerprint
        )

    def by_curve_key(self, curve_public: str) -> Entry | None:
        """The main entry holding this CurveZMQ key, for the ZAP handler."""
        return self._index()[1].get(curve_public)

    # --- changing -----------------------------------------------------------------------

    def add(
        self,
        public: PublicIdentity,
        *,
        state: KeyState = KeyState.PENDING,
        role: str | None = None,
        now_ms: int | None = None,
    ) -> Entry:
        """Register a key explicitly: an admin adding a user, a server or a node."""
        if state is KeyState.DENIED:
            raise KeyStateError("denied entries are only recorded when a node presents a key")
        entry = Entry.new(public, state, role, self._now(now_ms))
        with self._file.edit() as entries:
            existing = _main(entries, public.name)
            if existing is not None:
                raise KeyStateError(
                    f"{public.name} is already registered ({existing.state}); delete it first"
                )
            entries.append(entry)
        return entry

    def add_many(
        self,
        publics: Iterable[PublicIdentity],
        *,
        state: KeyState = KeyState.PENDING,
        now_ms: int | None = None,
    ) -> int:
        """Register many node or server keys in one write (bulk enrolment); all or nothing.

        A name registered already with the same keys is left as it is; with other keys it
        is a conflict, and nothing is written. Returns how many entries were added.
        """
        if state is KeyState.DENIED:
            raise KeyStateError("denied entries are only recorded when a node presents a key")
        at = self._now(now_ms)
        with self._file.edit() as entries:
            names = {e.name: e for e in entries if e.state is not KeyState.DENIED}
            added = 0
            for public in publics:
                existing = names.get(public.name)
                if existing is not None:
                    if existing.same_key(public):
                        continue
                    raise KeyStateError(
                        f"{public.name} is already registered with other keys; delete it first"
                    )
                entry = Entry.new(public, state, None, at)
                entries.append(entry)
                names[public.name] = entry
                added += 1
            return added

    def present(
        self,
        name: str,
        kind: str,
        ed25519_pub: bytes,
        curve_pub: str,
        *,
        auto_accept: bool,
        now_ms: int | None = None,
    ) -> KeyState:
        """A node shows up with these keys: record it if new, and return its state."""
        public = PublicIdentity(name, check_kind(kind), ed25519_pub, curve_pub)
        # Known keys are the common case (every reconnect): answer them without the lock.
        main = self.find(name)
        if main is not None and main.same_key(public):
            return main.state
        known = _known_state(self._file.read(), public)
        if known is not None:
            return known
        with self._file.edit() as entries:
            known = _known_state(entries, public)
            if known is not None:
                return known
            if _main(entries, name) is not None:
                state = KeyState.DENIED
            else:
                state = KeyState.ACCEPTED if auto_accept else KeyState.PENDING
            entries.append(Entry.new(public, state, None, self._now(now_ms)))
            return state

    def accept(self, names: Iterable[str], *, now_ms: int | None = None) -> Entries:
        return self._move(names, Action.ACCEPT, self._now(now_ms))

    def reject(self, names: Iterable[str], *, now_ms: int | None = None) -> Entries:
        """Reject pending keys, or revoke accepted ones."""
        return self._move(names, Action.REJECT, self._now(now_ms))

    def delete(self, names: Iterable[str]) -> Entries:
        """Remove every entry of each name, denied ones included; return what was removed."""
        removed: Entries = []
        with self._file.edit() as entries:
            for name in dict.fromkeys(names):
                mine = [e for e in entries if e.name == name]
                if not mine:
                    raise UnknownIdentity(f"no key named {name!r} in {self.path}")
                for entry in mine:
                    transition(entry.state, Action.DELETE)
                removed += mine
                entries[:] = [e for e in entries if e.name != name]
        return removed

    def set_role(self, name: str, role: str, *, now_ms: int | None = None) -> Entry:
        checked = check_role(role)
        with self._file.edit() as entries:
            index = self._main_index(entries, name)
            entries[index] = replace(entries[index], role=checked, updated_ms=self._now(now_ms))
            return entries[index]

    def _move(self, names: Iterable[str], action: Action, now_ms: int) -> Entries:
        changed: Entries = []
        with self._file.edit() as entries:
            for name in dict.fromkeys(names):
                index = self._main_index(entries, name)
                new_state = transition(entries[index].state, action)
                assert new_state is not None  # only delete removes
                entries[index] = replace(entries[index], state=new_state, updated_ms=now_ms)
                changed.append(entries[index])
        return changed

    def _main_index(self, entries: Sequence[Entry], name: str) -> int:
        for index, entry in enumerate(entries):
            if entry.name == name and entry.state is not KeyState.DENIED:
                return index
        raise UnknownIdentity(f"no key named {name!r} in {self.path}")


def _main(entries: Iterable[Entry], name: str) -> Entry | None:
    for entry in entries:
        if entry.name == name and entry.state is not KeyState.DENIED:
            return entry
    return None


def _known_state(entries: Sequence[Entry], public: PublicIdentity) -> KeyState | None:
    """The state ``present`` answers without recording anything, or None if it must record."""
    main = _main(entries, public.name)
    if main is None:
        return None
    if main.same_key(public):
        return main.state
    for entry in entries:
        if entry.name == public.name and entry.state is KeyState.DENIED and entry.same_key(public):
            return KeyState.DENIED
    return None
