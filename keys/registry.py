"""The key registry: which identities the server knows and in what state, as salt-key has.

Theory of operation. Each entry is a name, a kind (node, user, server), a role for users
(admin, writer, reader), its public keys and a state:

    pending   an unknown node presented this key; an admin must accept it
    accepted  may talk to the server
    rejected  refused (an accepted key that is rejected is revoked: cut off at once)
    denied    a known name presented a different key; kept for the admin to look at

The moves an admin can make are the table ``TRANSITIONS``; anything else raises
``KeyStateError`` and changes nothing. ``present`` is what the server calls when a node
shows up: an unknown name becomes pending (or accepted with auto-accept); a known name
with its own key gets its current state; a known name with another key is recorded as a
separate denied entry, and the original entry is left as it was.

Storage is one JSON file. Every change happens under an exclusive ``flock`` of a sidecar
lock file: reload, change, write to a temporary file, fsync, rename. Reads reload when the
file changed, so a server and an admin's CLI in two processes see each other's changes.
A corrupt file is an error naming it, never silently reset.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from keys.fingerprint import fingerprint
from keys.identity import PublicIdentity, b64, check_kind, check_name, unb64
from pushjobs.errors import KeyFileError, KeyStateError, UnknownIdentity

FORMAT = "pushjobs-key-registry/1"
ROLES = ("admin", "writer", "reader")


class KeyState(StrEnum):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    DENIED = "denied"


class Action(StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"


TRANSITIONS: Mapping[tuple[KeyState, Action], KeyState] = {
    (KeyState.PENDING, Action.ACCEPT): KeyState.ACCEPTED,
    (KeyState.REJECTED, Action.ACCEPT): KeyState.ACCEPTED,
    (KeyState.PENDING, Action.REJECT): KeyState.REJECTED,
    (KeyState.ACCEPTED, Action.REJECT): KeyState.REJECTED,
}


def transition(state: KeyState, action: Action) -> KeyState:
    new = TRANSITIONS.get((state, action))
    if new is None:
        raise KeyStateError(f"cannot {action} a key that is {state}")
    return new


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    kind: str
    role: str | None
    ed25519_public: str  # base64
    curve_public: str  # Z85
    fingerprint: str
    state: KeyState
    created_ms: int
    updated_ms: int

    @property
    def ed25519_raw(self) -> bytes:
        return unb64(self.ed25519_public, 32, "ed25519_public")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_identity(
        cls, public: PublicIdentity, state: KeyState, role: str | None, now_ms: int
    ) -> Entry:
        return cls(
            name=public.name,
            kind=public.kind,
            role=role,
            ed25519_public=b64(public.ed25519_public),
            curve_public=public.curve_public,
            fingerprint=public.fingerprint,
            state=state,
            created_ms=now_ms,
            updated_ms=now_ms,
        )


def _entry_from_json(data: Any) -> Entry:
    if not isinstance(data, dict):
        raise ValueError("entry is not an object")
    entry = Entry(**{**data, "state": KeyState(data["state"])})
    check_name(entry.name)
    check_kind(entry.kind)
    if entry.role is not None and entry.role not in ROLES:
        raise ValueError(f"unknown role {entry.role!r}")
    if fingerprint(entry.ed25519_raw) != entry.fingerprint:
        raise ValueError(f"fingerprint of {entry.name} does not match its key")
    return entry


class KeyRegistry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_path = path.with_name(path.name + ".lock")
        self._entries: list[Entry] = []
        self._stamp: tuple[int, int, int] | None = None
        self._reload()

    # --- reading ------------------------------------------------------------------------

    def _reload(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._entries, self._stamp = [], None
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise KeyFileError(f"{self.path}: cannot read the key registry: {exc}") from exc
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            entries = [_entry_from_json(item) for item in doc["entries"]]
        except (ValueError, KeyError, TypeError, KeyFileError) as exc:
            raise KeyFileError(f"{self.path}: corrupt key registry: {exc}") from exc
        self._entries, self._stamp = entries, stamp

    def entries(self, state: KeyState | str | None = None) -> list[Entry]:
        self._reload()
        wanted = KeyState(state) if state is not None else None
        return [e for e in self._entries if wanted is None or e.state is wanted]

    def get(self, name: str) -> Entry:
        """The name's main (not denied) entry."""
        self._reload()
        for entry in self._entries:
            if entry.name == name and entry.state is not KeyState.DENIED:
                return entry
        raise UnknownIdentity(f"no key named {name!r} in {self.path}")

    def find(self, name: str) -> Entry | None:
        try:
            return self.get(name)
        except UnknownIdentity:
            return None

    def is_authorized(self, name: str, key_fingerprint: str) -> bool:
        entry = self.find(name)
        return (
            entry is not None
            and entry.state is KeyState.ACCEPTED
            and entry.fingerprint == key_fingerprint
        )

    def by_curve_key(self, curve_public: str) -> Entry | None:
        self._reload()
        for entry in self._entries:
            if entry.curve_public == curve_public and entry.state is not KeyState.DENIED:
                return entry
        return None

    # --- changing -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[Entry]]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise KeyFileError(f"{self._lock_path}: cannot lock the key registry: {exc}") from exc
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._stamp = None  # always re-read under the lock
            self._reload()
            entries = list(self._entries)
            yield entries
            self._write(entries)
        finally:
            os.close(lock)  # releases the flock

    def _write(self, entries: list[Entry]) -> None:
        doc = {"format": FORMAT, "entries": [e.to_json() for e in entries]}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise KeyFileError(f"{self.path}: cannot write the key registry: {exc}") from exc
        self._entries = entries
        st = self.path.stat()
        self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)

    def add(
        self,
        public: PublicIdentity,
        now_ms: int,
        *,
        state: KeyState = KeyState.PENDING,
        role: str | None = None,
    ) -> Entry:
        """Register a key explicitly (an admin adding a user or a node)."""
        if role is not None and role not in ROLES:
            raise KeyFileError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")
        if public.kind == "user" and role is None:
            role = "reader"
        with self._locked() as entries:
            for existing in entries:
                if existing.name == public.name and existing.state is not KeyState.DENIED:
                    raise KeyStateError(
                        f"{public.name} is already registered ({existing.state}); delete it first"
                    )
            entry = Entry.from_identity(public, state, role, now_ms)
            entries.append(entry)
        return entry

    def present(self, public: PublicIdentity, now_ms: int, *, auto_accept: bool) -> KeyState:
        """A node shows up with ``public``: record it and return its state (see above)."""
        with self._locked() as entries:
            for existing in entries:
                if existing.name != public.name or existing.state is KeyState.DENIED:
                    continue
                if existing.fingerprint == public.fingerprint:
                    return existing.state
                for denied in entries:
                    if denied.state is KeyState.DENIED and denied.fingerprint == public.fingerprint:
                        return KeyState.DENIED
                entries.append(Entry.from_identity(public, KeyState.DENIED, None, now_ms))
                return KeyState.DENIED
            state = KeyState.ACCEPTED if auto_accept else KeyState.PENDING
            entries.append(Entry.from_identity(public, state, None, now_ms))
            return state

    def _apply(self, names: Iterable[str], action: Action, now_ms: int) -> list[Entry]:
        with self._locked() as entries:
            changed = []
            staged = list(entries)
            for name in names:
                index = _main_index(staged, name, self.path)
                entry = staged[index]
                staged[index] = replace(
                    entry, state=transition(entry.state, action), updated_ms=now_ms
                )
                changed.append(staged[index])
            entries[:] = staged
        return changed

    def accept(self, names: Iterable[str], now_ms: int) -> list[Entry]:
        return self._apply(names, Action.ACCEPT, now_ms)

    def reject(self, names: Iterable[str], now_ms: int) -> list[Entry]:
        """Reject pending keys, or revoke accepted ones."""
        return self._apply(names, Action.REJECT, now_ms)

    def delete(self, names: Iterable[str]) -> list[Entry]:
        """Remove every entry (denied ones too) of each name."""
        wanted = set(names)
        with self._locked() as entries:
            missing = sorted(wanted - {e.name for e in entries})
            if missing:
                raise UnknownIdentity(f"no key named {missing[0]!r} in {self.path}")
            removed = [e for e in entries if e.name in wanted]
            entries[:] = [e for e in entries if e.name not in wanted]
        return removed

    def set_role(self, name: str, role: str, now_ms: int) -> Entry:
        if role not in ROLES:
            raise KeyFileError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")
        with self._locked() as entries:
            index = _main_index(entries, name, self.path)
            if entries[index].kind != "user":
                raise KeyStateError(f"{name} is a {entries[index].kind}: only users have roles")
            entries[index] = replace(entries[index], role=role, updated_ms=now_ms)
            return entries[index]


def _main_index(entries: list[Entry], name: str, path: Path) -> int:
    for i, entry in enumerate(entries):
        if entry.name == name and entry.state is not KeyState.DENIED:
            return i
    raise UnknownIdentity(f"no key named {name!r} in {path}")
