"""Z85 (ZeroMQ RFC 32), the text form of CurveZMQ keys, so ``keys`` needs no zmq."""

from __future__ import annotations

import struct

from pushjobs.errors import KeyFileError

ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_INDEX = {c: i for i, c in enumerate(ALPHABET)}


def encode(data: bytes) -> str:
    if len(data) % 4:
        raise KeyFileError(f"Z85 input must be a multiple of 4 bytes, got {len(data)}")
    out = bytearray()
    for (group,) in struct.iter_unpack(">I", data):
        chunk = bytearray(5)
        value = group
        for i in range(4, -1, -1):
            value, digit = divmod(value, 85)
            chunk[i] = ALPHABET[digit]
        out += chunk
    return out.decode("ascii")


def decode(text: str) -> bytes:
    if not text.isascii():
        # Checked first: any lossy encoding could turn a stray character into a valid one.
        raise KeyFileError("Z85 text must be ASCII")
    raw = text.encode("ascii")
    if len(raw) % 5:
        raise KeyFileError(f"Z85 text must be a multiple of 5 characters, got {len(raw)}")
    out = bytearray()
    for start in range(0, len(raw), 5):
        value = 0
        for c in raw[start : start + 5]:
            digit = _INDEX.get(c)
            if digit is None:
                raise KeyFileError(f"invalid Z85 character {chr(c)!r}")
            value = value * 85 + digit
        if value > 0xFFFFFFFF:
            raise KeyFileError(f"invalid Z85 group {raw[start : start + 5].decode()!r}")
        out += struct.pack(">I", value)
    return bytes(out)
