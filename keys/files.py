"""Key files: ``NAME.key`` (private, 0600) and ``NAME.pub`` (public), small TOML texts.

The private file is created with mode 0600 from the start (``O_EXCL`` into a temporary
name in the same directory, fsync, rename), so it is never readable by others, not even
for an instant. Loading refuses a private file that group or world can read or write.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tomllib
from pathlib import Path

from keys.identity import (
    PrivateIdentity,
    PublicIdentity,
    b64,
    check_kind,
    check_name,
    curve_public_of,
    ed25519_public_of,
    unb64,
)
from pushjobs.errors import InsecureKeyFile, KeyFileError


def private_path(directory: Path, name: str) -> Path:
    return directory / f"{check_name(name)}.key"


def public_path(directory: Path, name: str) -> Path:
    return directory / f"{check_name(name)}.pub"


def _public_text(public: PublicIdentity) -> str:
    return (
        f"# pushjobs public key of {public.kind} {public.name}; safe to share\n"
        f'name = "{public.name}"\n'
        f'kind = "{public.kind}"\n'
        f'ed25519_public = "{b64(public.ed25519_public)}"\n'
        f'curve_public = "{_toml_escape(public.curve_public)}"\n'
        f'fingerprint = "{public.fingerprint}"\n'
    )


def _toml_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _private_text(identity: PrivateIdentity) -> str:
    public = identity.public
    return (
        f"# pushjobs PRIVATE key of {public.kind} {public.name}; keep it mode 0600, never share\n"
        f'name = "{public.name}"\n'
        f'kind = "{public.kind}"\n'
        f'ed25519_secret = "{b64(identity.ed25519_secret)}"\n'
        f'curve_secret = "{_toml_escape(identity.curve_secret)}"\n'
    )


def _write_atomic(path: Path, text: str, mode: int, *, force: bool) -> None:
    if path.exists() and not force:
        raise KeyFileError(f"{path}: already exists (use --force to replace it)")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot write: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed a public file's mode
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise KeyFileError(f"{path}: cannot write: {exc.strerror}") from exc


def save(identity: PrivateIdentity, directory: Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write NAME.key (0600) and NAME.pub (0644); return their paths."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise KeyFileError(f"{directory}: cannot create the key directory: {exc.strerror}") from exc
    key = private_path(directory, identity.name)
    pub = public_path(directory, identity.name)
    if not force:
        for path in (key, pub):
            if path.exists():
                raise KeyFileError(f"{path}: already exists (use --force to replace it)")
    _write_atomic(key, _private_text(identity), 0o600, force=force)
    _write_atomic(pub, _public_text(identity.public), 0o644, force=force)
    return key, pub


def _read(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file") from None
    except PermissionError:
        raise KeyFileError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise KeyFileError(f"{path}: is a directory, not a key file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path}: not a pushjobs key file ({exc})") from None


def _field(data: dict[str, object], key: str, path: Path) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise KeyFileError(f"{path}: missing or invalid '{key}'")
    return value


def load_private(path: Path) -> PrivateIdentity:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file") from None
    if mode & 0o077:
        raise InsecureKeyFile(
            f"{path}: private key is accessible by others (mode {mode:04o}); "
            f"fix it with: chmod 600 {path}"
        )
    data = _read(path)
    try:
        name = check_name(_field(data, "name", path))
        kind = check_kind(_field(data, "kind", path))
        seed = unb64(_field(data, "ed25519_secret", path), 32, "ed25519_secret")
        curve_secret = _field(data, "curve_secret", path)
        public = PublicIdentity(name, kind, ed25519_public_of(seed), curve_public_of(curve_secret))
    except KeyFileError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise KeyFileError(f"{path}: {exc}") from None
    return PrivateIdentity(public, seed, curve_secret)


def load_public(path: Path) -> PublicIdentity:
    data = _read(path)
    try:
        name = check_name(_field(data, "name", path))
        kind = check_kind(_field(data, "kind", path))
        ed_public = unb64(_field(data, "ed25519_public", path), 32, "ed25519_public")
        curve_public = _field(data, "curve_public", path)
        if len(curve_public) != 40:
            raise KeyFileError("curve_public must be 40 Z85 characters")
    except KeyFileError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise KeyFileError(f"{path}: {exc}") from None
    return PublicIdentity(name, kind, ed_public, curve_public)
