"""Key files: ``NAME.key`` (private, mode 0600) and ``NAME.pub`` (public, 0644).

Both are small TOML texts written by hand (every value is a plain string drawn from a
safe alphabet, so no quoting is needed) and read with ``tomllib``. The private file holds
only the secrets; its public half is derived on load, so the two cannot disagree.
Loading refuses a private file that group or world can read or write, as ssh does.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tomllib
from pathlib import Path

from keys.atomic import write_atomic
from keys.identity import (
    PrivateIdentity,
    PublicIdentity,
    b64,
    check_kind,
    check_name,
    unb64,
)
from pushjobs.errors import InsecureKeyFile, KeyFileError, MissingKeyFile


def private_path(directory: Path, name: str) -> Path:
    return directory / f"{check_name(name)}.key"


def public_path(directory: Path, name: str) -> Path:
    return directory / f"{check_name(name)}.pub"


def public_text(public: PublicIdentity) -> str:
    return (
        f"# pushjobs public key of {public.kind} {public.name}; safe to share\n"
        f'name = "{public.name}"\n'
        f'kind = "{public.kind}"\n'
        f'ed25519_public = "{b64(public.ed25519_public)}"\n'
        f'curve_public = "{public.curve_public}"\n'
        f'fingerprint = "{public.fingerprint}"\n'
    )


def private_text(identity: PrivateIdentity) -> str:
    public = identity.public
    return (
        f"# pushjobs PRIVATE key of {public.kind} {public.name}; keep it mode 0600, never share\n"
        f'name = "{public.name}"\n'
        f'kind = "{public.kind}"\n'
        f'ed25519_secret = "{b64(identity.ed25519_secret)}"\n'
        f'curve_secret = "{identity.curve_secret}"\n'
    )


def save(identity: PrivateIdentity, directory: Path, *, force: bool = False) -> tuple[Path, Path]:
    """Write NAME.key (0600) and NAME.pub (0644) into ``directory``; return their paths."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise KeyFileError(f"{directory}: cannot create the key directory: {exc.strerror}") from exc
    key = private_path(directory, identity.name)
    pub = public_path(directory, identity.name)
    if not force:
        # Checked up front so that an existing NAME.pub does not leave a lone new NAME.key.
        for path in (key, pub):
            if path.exists():
                raise KeyFileError(f"{path}: already exists (use --force to replace it)")
    write_atomic(key, private_text(identity).encode(), 0o600, replace=force)
    try:
        write_atomic(pub, public_text(identity.public).encode(), 0o644, replace=force)
    except KeyFileError:
        if not force:
            with contextlib.suppress(OSError):
                key.unlink()
        raise
    return key, pub


def load_private(path: Path) -> PrivateIdentity:
    data = _read(path, private=True)
    try:
        return PrivateIdentity.from_secrets(
            _field(data, "name"),
            _field(data, "kind"),
            unb64(_field(data, "ed25519_secret"), "ed25519_secret"),
            _field(data, "curve_secret"),
        )
    except KeyFileError as exc:
        raise KeyFileError(f"{path}: {exc}") from None


def load_public(path: Path) -> PublicIdentity:
    data = _read(path, private=False)
    try:
        public = PublicIdentity(
            check_name(_field(data, "name")),
            check_kind(_field(data, "kind")),
            unb64(_field(data, "ed25519_public"), "ed25519_public"),
            _field(data, "curve_public"),
        )
    except KeyFileError as exc:
        raise KeyFileError(f"{path}: {exc}") from None
    written = data.get("fingerprint")
    if written is not None and written != public.fingerprint:
        # The fingerprint line is what people compare by eye; it must not lie.
        raise KeyFileError(f"{path}: the fingerprint line does not match the key")
    return public


def _read(path: Path, *, private: bool) -> dict[str, object]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise MissingKeyFile(f"{path}: no such key file") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        # The mode is checked on the open file, so it is the mode of what is read.
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"{path}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if private and mode & 0o077:
            raise InsecureKeyFile(
                f"{path}: private key is accessible by others (mode {mode:04o}); "
                f"fix it with: chmod 600 {path}"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path}: not a pushjobs key file ({exc})") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _field(data: dict[str, object], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise KeyFileError(f"missing or invalid '{key}'")
    return value
