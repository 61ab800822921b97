"""Ed25519 and X25519 through libsodium, the library libzmq already loaded for CurveZMQ.

Why: ``cryptography`` costs a process about 9 MiB of resident memory at import (its Rust
extension, with a build of OpenSSL inside, is mapped and relocated whole), a quarter of an
idle agent. An agent needs four operations of it: the public halves of its own keys (to
check its key file), an Ed25519 signature (config requests) and an Ed25519 verification
(what the server sends). libsodium does those with the same results (RFC 8032 and RFC
7748 are deterministic: the same seed gives the same public key and the same signature)
and is already in the process wherever pyzmq was built with CURVE, as the pyzmq wheels are:
calling it costs no memory.

Which libsodium: the one already mapped into this process (``/proc/self/maps``: libzmq's),
else the system's (``ctypes.util.find_library``). ``available()`` is False where there is
none or it fails to initialise; the callers then use ``cryptography`` as before.

Every buffer handed to libsodium has the length its function reads (checked here, not
left to the caller): a short signature or key would have it read past the end.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

from pushjobs.errors import KeyFileError

SEED_BYTES = 32
PUBLIC_BYTES = 32
SECRET_BYTES = 64  # libsodium's Ed25519 secret key: the seed, then the public key
SIGNATURE_BYTES = 64

_buf = ctypes.c_char_p
_size = ctypes.c_ulonglong


def _mapped() -> str | None:
    """The path of a libsodium already mapped into this process, if any."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith("libsodium") and ".so" in path:
                    return path
    except OSError:
        pass
    return None


@cache
def _lib() -> ctypes.CDLL | None:
    path = _mapped() or ctypes.util.find_library("sodium")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        if lib.sodium_init() < 0:  # 1 when libzmq initialised it already: fine
            return None
        # Checked: these are the sizes the functions below are written for.
        sizes = (
            lib.crypto_sign_seedbytes(),
            lib.crypto_sign_publickeybytes(),
            lib.crypto_sign_secretkeybytes(),
            lib.crypto_sign_bytes(),
            lib.crypto_scalarmult_curve25519_bytes(),
        )
        if sizes != (SEED_BYTES, PUBLIC_BYTES, SECRET_BYTES, SIGNATURE_BYTES, PUBLIC_BYTES):
            return None
        lib.crypto_sign_seed_keypair.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _buf]
        lib.crypto_sign_detached.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _buf, _size, _buf]
        lib.crypto_sign_verify_detached.argtypes = [_buf, _buf, _size, _buf]
        lib.crypto_scalarmult_curve25519_base.argtypes = [ctypes.c_void_p, _buf]
    except (OSError, AttributeError):
        return None
    return lib


def available() -> bool:
    return _lib() is not None


def _need() -> ctypes.CDLL:
    lib = _lib()
    if lib is None:
        raise RuntimeError("libsodium is not available: check sodium.available() first")
    return lib


def _exact(data: bytes, size: int, what: str) -> bytes:
    if len(data) != size:
        raise KeyFileError(f"{what} must be {size} bytes, got {len(data)}")
    return data


def ed25519_keypair(seed: bytes) -> tuple[bytes, bytes]:
    """(public key, libsodium's 64-byte secret key) of a 32-byte Ed25519 seed."""
    _exact(seed, SEED_BYTES, "ed25519_secret")
    public = ctypes.create_string_buffer(PUBLIC_BYTES)
    secret = ctypes.create_string_buffer(SECRET_BYTES)
    if _need().crypto_sign_seed_keypair(public, secret, seed) != 0:
        raise KeyFileError("libsodium refused the Ed25519 seed")
    return public.raw, secret.raw


def x25519_public(secret: bytes) -> bytes:
    """The X25519 public key of a 32-byte secret (clamped, as X25519 always is)."""
    _exact(secret, SEED_BYTES, "curve_secret")
    public = ctypes.create_string_buffer(PUBLIC_BYTES)
    if _need().crypto_scalarmult_curve25519_base(public, secret) != 0:
        raise KeyFileError("curve_secret gives no valid X25519 public key")
    return public.raw


def sign(secret: bytes, data: bytes) -> bytes:
    """The Ed25519 signature of ``data`` by libsodium's 64-byte ``secret``."""
    _exact(secret, SECRET_BYTES, "an Ed25519 secret key")
    signature = ctypes.create_string_buffer(SIGNATURE_BYTES)
    if _need().crypto_sign_detached(signature, None, data, len(data), secret) != 0:
        raise KeyFileError("libsodium could not sign")
    return signature.raw


def verify(public: bytes, data: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is the Ed25519 signature of ``data`` by ``public``."""
    if len(public) != PUBLIC_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    return int(_need().crypto_sign_verify_detached(signature, data, len(data), public)) == 0
