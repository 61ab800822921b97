"""Who is calling the API: signatures checked against the key registry.

Users and known nodes sign API messages with their Ed25519 identity key; the header names
the key id, and the registry holds the public key. A node that is not in the registry yet
cannot be looked up, so its ``ConfigRequest`` is *self-signed*: the header's key id is the
public key itself (``fingerprint.self_key_id``), the signature is verified with it before
the body is decoded, and the message is accepted only if it is a config request carrying
that same key. That proves the sender holds the private key, which is all enrolment needs:
the registry then decides (pending, accepted, rejected, denied). A stranger's bytes are
never parsed before their signature holds.
"""

from __future__ import annotations

from base64 import b64decode, b64encode
from collections.abc import Sequence

from keys import fingerprint
from keys.entry import Entry
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import SignatureError, UnknownKey
from pushjobs.protocol.framing import FRAME_COUNT, Limits, open_frames, parse_header
from pushjobs.protocol.messages import ConfigRequest, Message
from pushjobs.protocol.signing import ED25519, Verifier, ed25519_verifier


class RegistryKeys:
    """Resolves Ed25519 key ids to registry entries, re-indexing when the file changes."""

    def __init__(self, registry: KeyRegistry) -> None:
        self.registry = registry
        self._source: tuple[Entry, ...] | None = None
        self._by_id: dict[str, Entry] = {}

    def entry(self, kid: str) -> Entry | None:
        entries = self.registry.entries()
        if entries is not self._source:
            self._by_id = {
                fingerprint.key_id(b64decode(e.ed25519_public)): e
                for e in entries
                if e.state is not KeyState.DENIED
            }
            self._source = entries
        return self._by_id.get(kid)

    def resolve(self, method: str, key_id: str) -> Verifier:
        if method != ED25519:
            raise UnknownKey("API messages must be signed with an Ed25519 identity key")
        entry = self.entry(key_id)
        if entry is None:
            raise UnknownKey(f"unknown key id {key_id[:32]!r}")
        return ed25519_verifier(b64decode(entry.ed25519_public), owner=entry.name)


def open_api_frames(frames: Sequence[bytes], keys: RegistryKeys, limits: Limits) -> Message:
    """A verified API message: signed by a registered key, or a self-signed config request."""
    try:
        return open_frames(frames, keys.resolve, limits)
    except UnknownKey:
        if len(frames) != FRAME_COUNT:
            raise
    return open_self_signed(frames, limits)


def open_self_signed(frames: Sequence[bytes], limits: Limits) -> ConfigRequest:
    method, kid = parse_header(frames[0])
    public = fingerprint.public_of_self_key_id(kid)
    if public is None or method != ED25519:
        raise UnknownKey(f"unknown key id {kid[:32]!r}")
    verifier = ed25519_verifier(public)

    def resolve(method: str, key_id: str) -> Verifier:
        return verifier

    message = open_frames(frames, resolve, limits)  # the signature before the body
    if not isinstance(message, ConfigRequest):
        raise UnknownKey("only a config request may be self-signed")
    if message.ed25519_public != b64encode(public).decode("ascii"):
        raise SignatureError("the key in the config request does not match the header's key")
    return message
