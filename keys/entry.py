"""One key registry entry and its JSON form; an entry that exists is a valid one."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from keys.identity import Kind, PublicIdentity, b64, check_kind, unb64
from keys.keystates import KeyState
from pushjobs.errors import KeyFileError, KeyRequestError

Role = Literal["admin", "writer", "reader"]
ROLES: tuple[Role, ...] = ("admin", "writer", "reader")
DEFAULT_ROLE: Role = "reader"  # least privilege for a user nobody gave a role


def check_role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise KeyFileError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    kind: Kind
    role: Role | None  # users only
    ed25519_public: str  # base64, as stored
    curve_public: str  # Z85
    fingerprint: str
    state: KeyState
    created_ms: int
    updated_ms: int
    attempts: int = 1
    """Denied entries only: how many times the name was presented with another key (the
    entry keeps the last key seen); one entry per name, however many keys are tried."""

    def __post_init__(self) -> None:
        if not isinstance(self.state, KeyState):
            raise KeyFileError(f"{self.name}: invalid state {self.state!r}")
        if self.kind != "user" and self.role is not None:
            raise KeyRequestError(f"{self.name} is a {self.kind}: only users have roles")
        if self.kind == "user":
            check_role(self.role or "")
        if self.public.fingerprint != self.fingerprint:
            raise KeyFileError(f"{self.name}: fingerprint does not match the key")

    @classmethod
    def new(cls, public: PublicIdentity, state: KeyState, role: str | None, now_ms: int) -> Entry:
        if public.kind == "user":
            role = check_role(role) if role is not None else DEFAULT_ROLE
        elif role is not None:
            raise KeyRequestError(f"{public.name} is a {public.kind}: only users have roles")
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

    @property
    def public(self) -> PublicIdentity:
        raw = unb64(self.ed25519_public, "ed25519_public")
        return PublicIdentity(self.name, self.kind, raw, self.curve_public)

    def same_key(self, public: PublicIdentity) -> bool:
        # Both keys: the same Ed25519 key with another CurveZMQ key is another identity.
        return self.fingerprint == public.fingerprint and self.curve_public == public.curve_public

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: object) -> Entry:
        # Registries written before ``attempts`` existed have every other field.
        if not isinstance(data, dict) or set(data) - {"attempts"} != set(_REQUIRED):
            raise KeyFileError(f"an entry must be an object with exactly: {', '.join(_FIELDS)}")
        attempts = data.get("attempts", 1)
        if type(attempts) is not int or attempts < 1:
            raise KeyFileError("entry field 'attempts' must be a positive integer")
        for key in ("name", "kind", "ed25519_public", "curve_public", "fingerprint", "state"):
            if not isinstance(data[key], str):
                raise KeyFileError(f"entry field {key!r} must be a string")
        for key in ("created_ms", "updated_ms"):
            if type(data[key]) is not int:
                raise KeyFileError(f"entry field {key!r} must be an integer")
        role = data["role"]
        if role is not None and not isinstance(role, str):
            raise KeyFileError("entry field 'role' must be a string or null")
        try:
            state = KeyState(data["state"])
        except ValueError:
            raise KeyFileError(f"unknown state {data['state']!r}") from None
        return cls(
            name=data["name"],
            kind=check_kind(data["kind"]),
            role=check_role(role) if role is not None else None,
            ed25519_public=data["ed25519_public"],
            curve_public=data["curve_public"],
            fingerprint=data["fingerprint"],
            state=state,
            created_ms=data["created_ms"],
            updated_ms=data["updated_ms"],
            attempts=attempts,
        )


_FIELDS = tuple(f.name for f in fields(Entry))
_REQUIRED = tuple(name for name in _FIELDS if name != "attempts")
