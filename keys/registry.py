"""The key registry: which identities the server knows, and in what state (see ``states``).

``present`` is what the server calls when a node shows up:

- an unknown name becomes a new ``pending`` entry (``accepted`` with auto-accept);
- a known name with its own keys gets its current state, and nothing changes;
- a known name with other keys is folded into the name's one ``denied`` entry (the last
  keys seen, how many attempts, when), the name's main entry is left exactly as it was,
  and ``denied`` is returned. However many keys a stranger tries under a name, the
  registry holds one denied entry for it.

``record`` does the same for many presentations in one write: the server batches what it
learns from unknown keys instead of writing once per key.

"The keys" are the Ed25519 and the CurveZMQ public key together: the node talks over
CurveZMQ, so a known Ed25519 key with a new CurveZMQ key is not the same identity.

Each name has at most one main (not denied) entry; ``get``, ``accept``, ``reject`` and
``set_role`` act on it, ``delete`` removes every entry of the name. A batch is all or
nothing. Times come from ``now_ms`` when given, else from the registry's clock.

Where the entries live is the store's business (``keys.registrystore``): a JSON file
(``keys.filestore``, given a path) or the ordered log's ``keys`` topic (``keys.topicstore``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from keys.entry import ROLES, Entry, check_role
from keys.filestore import RegistryFile
from keys.identity import PublicIdentity, check_kind
from keys.keystates import TRANSITIONS, Action, KeyState, transition
from keys.registrystore import RegistryStore
from pushjobs.clock import Clock, SystemClock
from pushjobs.errors import KeyFileError, KeyStateError, UnknownIdentity

__all__ = [
    "ROLES",
    "TRANSITIONS",
    "Action",
    "Entry",
    "KeyRegistry",
    "KeyState",
    "Presented",
    "transition",
]

Entries = list[Entry]  # the method ``list`` below would shadow the builtin in annotations
States = list[KeyState]


@dataclass(frozen=True, slots=True)
class Presented:
    """Keys a node presented: ``auto_accept`` for a new name, ``attempts`` when several
    presentations of other keys under a known name were folded into one."""

    public: PublicIdentity
    auto_accept: bool = False
    attempts: int = 1


class KeyRegistry:
    def __init__(self, source: Path | RegistryStore, *, clock: Clock | None = None) -> None:
        """A registry over a file (a path) or any other ``RegistryStore``."""
        self._store: RegistryStore = RegistryFile(source) if isinstance(source, Path) else source
        self.path: Path | None = self._store.path
        self.where = self._store.where
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._indexed: tuple[Entry, ...] | None = None
        self._by_name: dict[str, Entry] = {}
        self._by_curve: dict[str, Entry] = {}
        self._store.read()  # a corrupt registry fails at startup, not at the first node

    def writable(self) -> bool:
        """Whether changes may be written here now (not on a standby's log store)."""
        return self._store.writable()

    def _index(self) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """Main entries by name and by CurveZMQ key, rebuilt only when the entries changed.

        A server of 50,000 nodes looks names up on every config request and revocation
        check: a scan per lookup would be O(n^2) over an enrolment wave.
        """
        entries = self._store.read()
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
        entries = self._store.read()
        if state is None:
            return list(entries)
        try:
            wanted = KeyState(state)
        except ValueError:
            raise KeyFileError(f"unknown key state {state!r}") from None
        return [e for e in entries if e.state is wanted]

    def entries(self) -> tuple[Entry, ...]:
        """Every entry; the same tuple object until they change (cheap to cache on)."""
        return self._store.read()

    def get(self, name: str) -> Entry:
        """The name's main (not denied) entry."""
        entry = self.find(name)
        if entry is None:
            raise UnknownIdentity(f"no key named {name!r} in {self.where}")
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
        with self._store.edit() as entries:
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
        with self._store.edit() as entries:
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
        known = self.known(public)
        if known is not None:
            return known
        return self.record([Presented(public, auto_accept)], now_ms=now_ms)[0]

    def known(self, public: PublicIdentity) -> KeyState | None:
        """The state of these keys if ``present`` would record nothing for them; else None."""
        # Known keys are the common case (every reconnect): answer them without the lock.
        main = self.find(public.name)
        if main is not None and main.same_key(public):
            return main.state
        return _known_state(self._store.read(), public)

    def record(self, presented: Sequence[Presented], *, now_ms: int | None = None) -> States:
        """Record many presentations in one write; the state each got."""
        at = self._now(now_ms)
        states: list[KeyState] = []
        with self._store.edit() as entries:
            for item in presented:
                public = item.public
                known = _known_state(entries, public)
                if known is not None:
                    states.append(known)
                elif _main(entries, public.name) is not None:
                    _fold_denied(entries, public, at, item.attempts)
                    states.append(KeyState.DENIED)
                else:
                    state = KeyState.ACCEPTED if item.auto_accept else KeyState.PENDING
                    entries.append(Entry.new(public, state, None, at))
                    states.append(state)
        return states

    def accept(self, names: Iterable[str], *, now_ms: int | None = None) -> Entries:
        return self._move(names, Action.ACCEPT, self._now(now_ms))

    def reject(self, names: Iterable[str], *, now_ms: int | None = None) -> Entries:
        """Reject pending keys, or revoke accepted ones."""
        return self._move(names, Action.REJECT, self._now(now_ms))

    def delete(self, names: Iterable[str]) -> Entries:
        """Remove every entry of each name, denied ones included; return what was removed."""
        removed: Entries = []
        with self._store.edit() as entries:
            for name in dict.fromkeys(names):
                mine = [e for e in entries if e.name == name]
                if not mine:
                    raise UnknownIdentity(f"no key named {name!r} in {self.where}")
                for entry in mine:
                    transition(entry.state, Action.DELETE)
                removed += mine
                entries[:] = [e for e in entries if e.name != name]
        return removed

    def set_role(self, name: str, role: str, *, now_ms: int | None = None) -> Entry:
        checked = check_role(role)
        with self._store.edit() as entries:
            index = self._main_index(entries, name)
            entries[index] = replace(entries[index], role=checked, updated_ms=self._now(now_ms))
            return entries[index]

    def _move(self, names: Iterable[str], action: Action, now_ms: int) -> Entries:
        changed: Entries = []
        with self._store.edit() as entries:
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
        raise UnknownIdentity(f"no key named {name!r} in {self.where}")


def _main(entries: Iterable[Entry], name: str) -> Entry | None:
    for entry in entries:
        if entry.name == name and entry.state is not KeyState.DENIED:
            return entry
    return None


def _fold_denied(entries: list[Entry], public: PublicIdentity, now_ms: int, tries: int) -> None:
    """Fold more attempts under ``public.name`` into the name's one denied entry."""
    mine = [
        i for i, e in enumerate(entries) if e.name == public.name and e.state is KeyState.DENIED
    ]
    if not mine:
        entries.append(replace(Entry.new(public, KeyState.DENIED, None, now_ms), attempts=tries))
        return
    first = entries[mine[0]]
    # Registries from before folding may hold several: they become one.
    attempts = sum(entries[i].attempts for i in mine) + tries
    fresh = Entry.new(public, KeyState.DENIED, None, now_ms)
    entries[mine[0]] = replace(fresh, created_ms=first.created_ms, attempts=attempts)
    for i in reversed(mine[1:]):
        del entries[i]


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
