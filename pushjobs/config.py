"""Configuration: TOML files mapped onto frozen dataclasses, with defaults and env overrides.

Each program declares its configuration as a tree of frozen dataclasses whose fields all
have defaults. ``load_config`` reads a TOML file (or none: defaults only), applies
environment overrides, and checks every value; anything wrong is a ``ConfigError`` that
names the file, the dotted key and the problem, never a traceback from deep inside.

Environment overrides use ``<PREFIX><SECTION>__<KEY>``, upper case, for example
``PUSHJOBS_LIVENESS__INTERVAL_S=0.5``. Values are parsed as the field's type: booleans
accept 1/0/true/false/yes/no/on/off; lists are comma separated.

A dataclass may define ``check(self) -> Iterable[tuple[str, str]]`` yielding
``(field, problem)`` pairs for rules that span fields or ranges.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pushjobs.errors import ConfigError

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True, slots=True)
class ProtocolSettings:
    """Wire limits shared by every endpoint."""

    max_header_bytes: int = 2048
    max_body_bytes: int = 65536
    max_skew_s: float = 30.0

    def check(self) -> Iterable[tuple[str, str]]:
        if not 16 <= self.max_header_bytes <= 2048:
            yield "max_header_bytes", "must be between 16 and 2048"
        if not 256 <= self.max_body_bytes <= 64 * 1024 * 1024:
            yield "max_body_bytes", "must be between 256 and 67108864"
        if self.max_skew_s <= 0:
            yield "max_skew_s", "must be greater than 0"


@dataclass(frozen=True, slots=True)
class LivenessSettings:
    """Heartbeat interval and the online/offline thresholds, in intervals."""

    interval_s: float = 1.0
    offline_threshold: int = 3
    online_threshold: int = 2

    def check(self) -> Iterable[tuple[str, str]]:
        if self.interval_s <= 0:
            yield "interval_s", "must be greater than 0"
        if self.offline_threshold < 1:
            yield "offline_threshold", "must be at least 1"
        if self.online_threshold < 1:
            yield "online_threshold", "must be at least 1"


def load_config(
    cls: type[T],
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    env_prefix: str = "PUSHJOBS_",
) -> T:
    """Build ``cls`` from defaults, then the TOML file at ``path``, then the environment."""
    where = str(path) if path is not None else None
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_toml(Path(path))
    environ = os.environ if env is None else env
    _apply_env(cls, raw, environ, env_prefix, where)
    return _build(cls, raw, where, prefix="")


def load_table(cls: type[T], path: str | os.PathLike[str], table: str) -> T:
    """Build ``cls`` from one table of the TOML file at ``path`` (the others are ignored):
    a tool reading the part of a daemon's config that concerns it."""
    raw = read_toml(Path(path)).get(table, {})
    return _build(cls, raw, str(path), prefix=f"{table}.")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError("file not found", path=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a TOML file", path=str(path)) from None
    except PermissionError:
        raise ConfigError("permission denied", path=str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: {exc}", path=str(path)) from exc


def _hints(cls: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _apply_env(
    cls: type[Any], raw: dict[str, Any], environ: Mapping[str, str], prefix: str, where: str | None
) -> None:
    """Overlay ``PREFIX<A>__<B>...`` variables onto ``raw`` as typed values."""
    for name, value in environ.items():
        if not name.startswith(prefix) or "__" not in name[len(prefix) :]:
            continue
        parts = name[len(prefix) :].lower().split("__")
        target_cls: Any = cls
        table = raw
        for i, part in enumerate(parts):
            fields = {f.name: f for f in dataclasses.fields(target_cls)}
            if part not in fields:
                break  # a variable for someone else; not ours to judge
            hint = _hints(target_cls)[part]
            if dataclasses.is_dataclass(hint) and i < len(parts) - 1:
                table = table.setdefault(part, {})
                if not isinstance(table, dict):
                    raise ConfigError("expected a table", path=where, key=".".join(parts[: i + 1]))
                target_cls = hint
                continue
            if i == len(parts) - 1:
                table[part] = _parse_env(hint, value, name)
            break


def _parse_env(hint: Any, text: str, var: str) -> Any:
    base = _strip_optional(hint)
    try:
        if base is bool:
            low = text.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError("expected true or false")
        if base is int:
            return int(text)
        if base is float:
            return float(text)
        if typing.get_origin(base) in (list, tuple):
            return [item.strip() for item in text.split(",") if item.strip()]
    except ValueError as exc:
        raise ConfigError(f"cannot parse {text!r}: {exc}", path=f"${var}") from None
    return text


def _strip_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return hint


def _build(cls: type[T], raw: Mapping[str, Any], where: str | None, prefix: str) -> T:
    if not isinstance(raw, Mapping):
        raise ConfigError("expected a table", path=where, key=prefix.rstrip(".") or None)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key (known keys: {', '.join(sorted(fields))})",
            path=where,
            key=prefix + unknown[0],
        )
    kwargs: dict[str, Any] = {}
    for name in fields:
        if name not in raw:
            continue
        hint = hints[name]
        key = prefix + name
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(typing.cast(type[Any], hint), raw[name], where, key + ".")
        else:
            kwargs[name] = _coerce(hint, raw[name], where, key)
    result = cls(**kwargs)
    check = getattr(result, "check", None)
    if check is not None:
        for field_name, problem in check():
            raise ConfigError(problem, path=where, key=prefix + field_name)
    return result


def _coerce(hint: Any, value: Any, where: str | None, key: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        problems = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where, key)
            except ConfigError as exc:
                problems.append(exc.problem)
        raise ConfigError("; ".join(problems), path=where, key=key)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"expected true or false, got {value!r}", path=where, key=key)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"expected an integer, got {value!r}", path=where, key=key)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"expected a number, got {value!r}", path=where, key=key)
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"expected a string, got {value!r}", path=where, key=key)
    if hint is Path:
        if isinstance(value, str | Path):
            return Path(value).expanduser()
        raise ConfigError(f"expected a path, got {value!r}", path=where, key=key)
    if origin in (list, tuple):
        (item_hint, *_) = typing.get_args(hint) or (Any,)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"expected a list, got {value!r}", path=where, key=key)
        items = [_coerce(item_hint, v, where, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or origin is Mapping:
        key_hint, val_hint = typing.get_args(hint) or (str, Any)
        if not isinstance(value, Mapping):
            raise ConfigError(f"expected a table, got {value!r}", path=where, key=key)
        return {
            _coerce(key_hint, k, where, key): _coerce(val_hint, v, where, f"{key}.{k}")
            for k, v in value.items()
        }
    raise ConfigError(f"unsupported type {hint!r}", path=where, key=key)
