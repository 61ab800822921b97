"""Key states and the moves between them: a pure transition table.

Theory of operation. A key registry entry is in one of four states, as in salt-key:

    pending   an unknown node presented this key; an admin has to decide
    accepted  the key may talk to the server
    rejected  refused; rejecting an accepted key revokes it, which cuts the node off
    denied    a known name presented a different key; kept for the admin to look at

Entries reach ``pending``, ``accepted`` or ``denied`` when they are created (by the
server when a node presents itself, or by an admin adding a key). After that only an
admin moves them, with the actions below, and only along a row of ``TRANSITIONS``:
anything else raises ``KeyStateError`` and changes nothing.

A denied entry cannot be accepted: an impostor's key must never become trusted by one
command. If a node was really re-keyed, the admin deletes its name (which removes the old
entry and every denied one) and accepts the new key when the node presents it again.

``delete`` leads out of the table: its new state is ``None``, the entry is removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pushjobs.errors import KeyStateError


class KeyState(StrEnum):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    DENIED = "denied"


class Action(StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"
    DELETE = "delete"


TRANSITIONS: Mapping[tuple[KeyState, Action], KeyState | None] = {
    (KeyState.PENDING, Action.ACCEPT): KeyState.ACCEPTED,
    (KeyState.REJECTED, Action.ACCEPT): KeyState.ACCEPTED,
    (KeyState.PENDING, Action.REJECT): KeyState.REJECTED,
    (KeyState.ACCEPTED, Action.REJECT): KeyState.REJECTED,
    (KeyState.PENDING, Action.DELETE): None,
    (KeyState.ACCEPTED, Action.DELETE): None,
    (KeyState.REJECTED, Action.DELETE): None,
    (KeyState.DENIED, Action.DELETE): None,
}


def transition(state: KeyState, action: Action) -> KeyState | None:
    """The state after ``action``; ``None`` means the entry is removed."""
    try:
        return TRANSITIONS[(state, action)]
    except KeyError:
        raise KeyStateError(f"cannot {action} a key that is {state}") from None
