"""Writing TOML: the few value types pushjobs config files hold, no dependency.

``toml_text`` turns tables of strings, numbers, booleans and lists into TOML text that
``pushjobs.config.read_toml`` reads back unchanged. Pure: the caller writes the file.
"""

from __future__ import annotations

from collections.abc import Mapping


def toml_text(tables: Mapping[str, Mapping[str, object]]) -> str:
    lines: list[str] = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{_quote_key(k)} = {_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _quote_key(key: str) -> str:
    if key.replace("-", "").replace("_", "").isalnum():
        return key
    return _value(key)
