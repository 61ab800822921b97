"""Framing: a message on the wire is exactly three frames, header / body / signature.

    header     ASCII ``PJ1 <method> <key id>``, at most ``max_header_bytes``
    body       one JSON object (``codec.py``), at most ``max_body_bytes``
    signature  over ``header + b"\\n" + body`` (``signing.py``)

``open_frames`` checks, in this order and before any parsing, the frame count and the size
of each frame; then parses the header, resolves the verifier for its method and key id,
checks the signature length and the signature, and only then decodes the body. Last, it
checks that the key's owner, if the key has one, is the message's sender. Every failure is
a ``ProtocolError`` the receiver drops and counts. ``open_beat`` is the same with a node
heartbeat's body decoded into its fields alone (``codec.decode_beat``), for an edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from pushjobs.errors import FrameError, OversizedFrame, SignatureError
from pushjobs.protocol.codec import Beat, decode, decode_beat, encode
from pushjobs.protocol.messages import Message
from pushjobs.protocol.signing import METHODS, SIGNATURE_BYTES, Signer, Verifier

VERSION: Final = "PJ1"
FRAME_COUNT: Final = 3
# No installation may configure a larger body (``ProtocolSettings``): the frame limit of a
# socket that must accept whatever its server was configured to send.
MAX_BODY_CEILING: Final = 64 * 1024 * 1024
MAX_KEY_ID_CHARS: Final = 128
_KEY_ID_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@:+/=-"
)


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_bytes: int = 2048
    max_body_bytes: int = 65536


DEFAULT_LIMITS: Final = Limits()


class KeyResolver(Protocol):
    def __call__(self, method: str, key_id: str) -> Verifier:
        """The verifier for that key; raise UnknownKey when there is none."""
        ...


def header_for(signer: Signer) -> bytes:
    key_id = signer.key_id
    if not 0 < len(key_id) <= MAX_KEY_ID_CHARS or not _KEY_ID_CHARS.issuperset(key_id):
        raise FrameError(f"invalid key id {key_id!r}")
    return f"{VERSION} {signer.method} {key_id}".encode("ascii")


def seal(message: Message, signer: Signer, limits: Limits = DEFAULT_LIMITS) -> list[bytes]:
    """Encode, frame and sign ``message``; refuse to send what a receiver would drop."""
    return seal_body(encode(message), signer, limits)


def seal_body(body: bytes, signer: Signer, limits: Limits = DEFAULT_LIMITS) -> list[bytes]:
    """Frame and sign an encoded body (``seal``; a fan-out stamps its bodies from one
    template, ``template.BodyTemplate``)."""
    header = header_for(signer)
    if len(body) > limits.max_body_bytes:
        raise OversizedFrame(f"body of {len(body)} bytes exceeds {limits.max_body_bytes}")
    return [header, body, signer.sign(header + b"\n" + body)]


# Valid headers repeat (one per key), so their parse is cached; bounded so garbage cannot
# grow it, and only valid headers enter it.
_HEADER_CACHE: dict[bytes, tuple[str, str]] = {}
_HEADER_CACHE_MAX = 65536


def parse_header(header: bytes) -> tuple[str, str]:
    """(method, key id) of a header frame, or FrameError."""
    cached = _HEADER_CACHE.get(header)
    if cached is not None:
        return cached
    parsed = _parse_header(header)
    if len(_HEADER_CACHE) >= _HEADER_CACHE_MAX:
        _HEADER_CACHE.clear()
    _HEADER_CACHE[header] = parsed
    return parsed


def _parse_header(header: bytes) -> tuple[str, str]:
    try:
        text = header.decode("ascii")
    except UnicodeDecodeError:
        raise FrameError("header is not ASCII") from None
    parts = text.split(" ")
    if len(parts) != 3:
        raise FrameError("header must be 'VERSION METHOD KEYID'")
    version, method, key_id = parts
    if version != VERSION:
        raise FrameError(f"unsupported protocol version {version[:16]!r}")
    if method not in METHODS:
        raise FrameError(f"unknown signing method {method[:32]!r}")
    if not 0 < len(key_id) <= MAX_KEY_ID_CHARS or not _KEY_ID_CHARS.issuperset(key_id):
        raise FrameError("invalid key id in header")
    return method, key_id


# Headers whose key resolved, parsed: the receive path looks here first. Only a header
# that named a key the resolver held enters, so its size follows the keys in use (a fleet
# of 100,000 nodes thrashed the 65,536 of the general cache above, and a parse costs ten
# lookups); the bound only stops growth across key rotations.
_RESOLVED: dict[bytes, tuple[str, str]] = {}
_RESOLVED_MAX = 1 << 18


def _verified(frames: Sequence[bytes], resolve: KeyResolver, limits: Limits) -> Verifier:
    """The verifier whose key signed ``frames``, every check before the body's run."""
    if len(frames) != FRAME_COUNT:
        raise FrameError(f"expected {FRAME_COUNT} frames, got {len(frames)}")
    header, body, signature = frames
    if len(header) > limits.max_header_bytes:
        raise OversizedFrame(f"header of {len(header)} bytes exceeds {limits.max_header_bytes}")
    if len(body) > limits.max_body_bytes:
        raise OversizedFrame(f"body of {len(body)} bytes exceeds {limits.max_body_bytes}")
    parsed = _RESOLVED.get(header)
    method, key_id = parse_header(header) if parsed is None else parsed
    if len(signature) != SIGNATURE_BYTES[method]:
        raise SignatureError(f"{method} signature must be {SIGNATURE_BYTES[method]} bytes")
    verifier = resolve(method, key_id)
    if verifier.method != method:
        raise SignatureError(f"key {key_id} is not a {method} key")
    if parsed is None:
        if len(_RESOLVED) >= _RESOLVED_MAX:
            _RESOLVED.clear()
        _RESOLVED[header] = (method, key_id)
    verifier.verify_frames(header, body, signature)
    return verifier


def _not_owner(header: bytes, sender: str) -> SignatureError:
    key_id = parse_header(header)[1]  # a failure: no need for speed
    return SignatureError(f"key {key_id} does not belong to sender {sender[:64]!r}")


def open_frames(
    frames: Sequence[bytes], resolve: KeyResolver, limits: Limits = DEFAULT_LIMITS
) -> Message:
    """The verified, decoded message; its sender is the key's owner when the key has one."""
    verifier = _verified(frames, resolve, limits)
    message = decode(frames[1])
    if verifier.owner is not None and message.sender != verifier.owner:
        raise _not_owner(frames[0], message.sender)
    return message


def open_beat(
    frames: Sequence[bytes], resolve: KeyResolver, limits: Limits = DEFAULT_LIMITS
) -> Message | Beat:
    """As ``open_frames``, with a node heartbeat's body decoded into its fields alone
    (``codec.decode_beat``): the same checks in the same order, no message object."""
    verifier = _verified(frames, resolve, limits)
    decoded = decode_beat(frames[1])
    sender = decoded[0] if isinstance(decoded, tuple) else decoded.sender
    if verifier.owner is not None and sender != verifier.owner:
        raise _not_owner(frames[0], sender)
    return decoded
