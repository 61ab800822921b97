"""Z85 (ZeroMQ RFC 32), the text form of CurveZMQ keys, so ``keys`` needs no zmq."""

from __future__ import annotations

import struct

from pushjobs.errors import KeyFileError

ALPHABET = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_INDEX = {c: i for i, c in enumerate(ALPHABET)}


def encode(data: bytes) -> str:
    if len(data) % 4:
        raise KeyFileError("Z85 input must be a multiple of 4 bytes")
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
    raw = text.encode("ascii", errors="replace")
    if len(raw) % 5:
        raise KeyFileError("Z85 text must be a multiple of 5 characters")
    out = bytearray()
    for start in range(0, len(raw), 5):
        word = 0
        for c in raw[start : start + 5]:
            digit = _INDEX.get(c)
            if digit is None:
                raise KeyFileError(f"invalid Z85 character {chr(c)!r}")
            word = word * 85 + digit
        if word > 0xFFFFFFFF:
            raise KeyFileError("invalid Z85 group")
        out += struct.pack(">I", word)
    return bytes(out)
