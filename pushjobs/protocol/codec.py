"""The one codec: messages to JSON bodies (orjson) and back, with strict validation.

The schema is the dataclass annotations in ``messages.py``; at import time each message
class is compiled into a ``_Spec``: the exact set of wire keys, a tuple of fields whose
wire type must match exactly (checked with ``type(v) is T``, the cheap path that carries
heartbeats), and converters for the rest (optionals, floats, nested dataclasses, maps,
tuples, literals). Decoding never trusts the body: a body that is not a JSON object, an
unknown ``type``, a missing or extra key, or a value of the wrong type raises
``MalformedMessage`` chained to the cause. Booleans are never accepted as integers. A
field marked ``OPTIONAL`` (added after its message's first version) is the one exception:
it is left off the wire while it holds its default and may be missing from a body (it is
then its default), so peers of either version still understand each other.
``decode_beat`` is ``decode`` with a node heartbeat returned as a tuple of its fields:
the same checks written out for the one message read by the ten thousand a second.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from pushjobs.errors import MalformedMessage
from pushjobs.protocol import messages
from pushjobs.protocol.messages import MESSAGE_TYPES, Message

_Convert = Callable[[Any, str], Any]

# Envelope values are bounded so a peer cannot make us keep huge keys in replay tables.
MAX_ID_CHARS = 256


class _Spec:
    """A compiled message class: a generated fast validator-builder plus a slow explainer.

    ``build`` is generated source, as dataclasses and attrs generate ``__init__``: one
    straight-line function per class with the type checks unrolled and fields set through
    the slot descriptors (bypassing the frozen ``__setattr__``). Loops over field tables
    cost more than the JSON parse itself for a heartbeat. Any failed check hands over to
    ``explain``, which walks the same tables slowly to raise a precise error.
    """

    __slots__ = ("build", "cls", "convert", "defaults", "exact", "names")

    def __init__(
        self,
        cls: type[Any],
        exact: tuple[tuple[str, frozenset[type]], ...],
        convert: tuple[tuple[str, _Convert], ...],
    ) -> None:
        self.cls = cls
        self.names = frozenset(f.name for f in dataclasses.fields(cls))
        # Optional fields and their defaults (filled in before the exact key check).
        self.defaults = {
            f.name: f.default
            for f in dataclasses.fields(cls)
            if f.metadata.get("wire") == "optional"
        }
        self.exact = exact
        self.convert = convert
        self.build: Callable[[dict[str, Any], str], Any] = self._generate()

    def _generate(self) -> Callable[[dict[str, Any], str], Any]:
        names = [f.name for f in dataclasses.fields(self.cls)]
        env: dict[str, Any] = {
            "names": self.names,
            "explain": self.explain,
            "new": object.__new__,
            "cls": self.cls,
            "NoneType": type(None),
        }
        lines = ["def build(obj, where):", "    if obj.keys() != names:"]
        if self.defaults:
            # As the wire has them (a tuple is an array), for the converters to read.
            env["defaults"] = {
                k: list(v) if isinstance(v, tuple) else v for k, v in self.defaults.items()
            }
            lines += [
                "        obj = {**defaults, **obj}",
                "        if obj.keys() != names:",
                "            return explain(obj, where)",
            ]
        else:
            lines.append("        return explain(obj, where)")
        index = {name: i for i, name in enumerate(names)}
        for name, allowed in self.exact:
            i = index[name]
            lines.append(f"    v{i} = obj[{name!r}]")
            plain = sorted(t.__name__ for t in allowed if t is not type(None))
            if len(plain) == 1 and len(allowed) == 1:
                lines.append(f"    if type(v{i}) is not {plain[0]}:")
            elif len(plain) == 1:
                lines.append(f"    if v{i} is not None and type(v{i}) is not {plain[0]}:")
            else:
                env[f"allowed{i}"] = allowed
                lines.append(f"    if type(v{i}) not in allowed{i}:")
            lines.append("        return explain(obj, where)")
        for name, convert in self.convert:
            i = index[name]
            env[f"convert{i}"] = convert
            lines.append(f"    v{i} = convert{i}(obj[{name!r}], where + {'.' + name!r})")
        lines.append("    o = new(cls)")
        checked = {name for name, _ in self.exact} | {name for name, _ in self.convert}
        for i, name in enumerate(names):
            env[f"set{i}"] = getattr(self.cls, name).__set__
            value = f"v{i}" if name in checked else f"obj[{name!r}]"  # Any fields pass as is
            lines.append(f"    set{i}(o, {value})")
        lines.append("    return o")
        # The source is built above from dataclass field names only, never from input.
        exec("\n".join(lines), env)
        build: Callable[[dict[str, Any], str], Any] = env["build"]
        return build

    def explain(self, obj: dict[str, Any], where: str) -> Any:
        if obj.keys() != self.names:
            missing = sorted(self.names - obj.keys())
            extra = sorted(obj.keys() - self.names)
            problems = []
            if missing:
                problems.append(f"missing {', '.join(missing)}")
            if extra:
                problems.append(f"unexpected {', '.join(map(str, extra))}")
            raise MalformedMessage(f"{where}: {'; '.join(problems)}")
        for name, allowed in self.exact:
            if type(obj[name]) not in allowed:
                expected = " or ".join(sorted(_TYPE_NAMES[t] for t in allowed))
                raise MalformedMessage(
                    f"{where}.{name}: expected {expected}, got {_kind(obj[name])}"
                )
        raise MalformedMessage(f"{where}: invalid")  # pragma: no cover - build() agrees


_TYPE_NAMES: dict[type, str] = {
    str: "string",
    int: "integer",
    bool: "boolean",
    float: "number",
    type(None): "null",
}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _compile_type(hint: Any) -> tuple[frozenset[type] | None, _Convert]:
    """(exact wire types, or None, and a converter) for an annotation.

    When exact types are given, checking ``type(v) in types`` is the whole validation and
    the converter is only used inside containers.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return None, lambda v, where: v
    if hint in (str, int, bool):
        exact = frozenset({hint})
        return exact, _exact_checker(exact)
    if hint is float:

        def to_float(v: Any, where: str) -> float:
            if type(v) is float or type(v) is int:
                return float(v)
            raise MalformedMessage(f"{where}: expected a number, got {_kind(v)}")

        return None, to_float
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"unsupported union {hint!r}")
        exact_inner, convert_inner = _compile_type(inner[0])
        if exact_inner is not None:
            exact = exact_inner | {type(None)}
            return exact, _exact_checker(exact)

        def optional(v: Any, where: str) -> Any:
            return None if v is None else convert_inner(v, where)

        return None, optional
    if origin is typing.Literal:
        allowed = frozenset(args)

        def literal(v: Any, where: str) -> Any:
            if type(v) is not str or v not in allowed:
                raise MalformedMessage(f"{where}: expected one of {sorted(allowed)}, got {v!r}")
            return v

        return None, literal
    if origin is dict:
        key_t, val_t = args
        if key_t is not str:
            raise TypeError(f"unsupported map key type in {hint!r}")
        _, convert_val = _compile_type(val_t)
        any_value = val_t is Any

        def mapping(v: Any, where: str) -> dict[str, Any]:
            if type(v) is not dict:
                raise MalformedMessage(f"{where}: expected an object, got {_kind(v)}")
            if any_value:
                return v
            return {k: convert_val(item, f"{where}.{k}") for k, item in v.items()}

        return None, mapping
    if origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"only homogeneous tuples are supported, not {hint!r}")
        _, convert_item = _compile_type(args[0])

        def sequence(v: Any, where: str) -> tuple[Any, ...]:
            if type(v) is not list:
                raise MalformedMessage(f"{where}: expected an array, got {_kind(v)}")
            return tuple(convert_item(item, f"{where}[{i}]") for i, item in enumerate(v))

        return None, sequence
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        spec = _compile_spec(hint)

        def nested(v: Any, where: str) -> Any:
            if type(v) is not dict:
                raise MalformedMessage(f"{where}: expected an object, got {_kind(v)}")
            return spec.build(v, where)

        return None, nested
    raise TypeError(f"unsupported field type {hint!r}")


def _exact_checker(exact: frozenset[type]) -> _Convert:
    expected = " or ".join(sorted(_TYPE_NAMES[t] for t in exact))

    def check(v: Any, where: str) -> Any:
        if type(v) not in exact:
            raise MalformedMessage(f"{where}: expected {expected}, got {_kind(v)}")
        return v

    return check


def _compile_spec(cls: type[Any]) -> _Spec:
    hints = typing.get_type_hints(cls, vars(messages))
    exact: list[tuple[str, frozenset[type]]] = []
    convert: list[tuple[str, _Convert]] = []
    for f in dataclasses.fields(cls):
        if hints[f.name] is Any:
            continue
        exact_types, converter = _compile_type(hints[f.name])
        if exact_types is not None:
            exact.append((f.name, exact_types))
        else:
            convert.append((f.name, converter))
    return _Spec(cls, tuple(exact), tuple(convert))


_SPECS: dict[str, _Spec] = {cls.TYPE: _compile_spec(cls) for cls in MESSAGE_TYPES}
_OPTIONAL: dict[type[Any], tuple[tuple[str, Any], ...]] = {
    cls: tuple(spec.defaults.items())
    for cls in MESSAGE_TYPES
    if (spec := _SPECS[cls.TYPE]).defaults
}
_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in MESSAGE_TYPES
}


def encode(message: Message) -> bytes:
    """The JSON body of ``message``: its fields plus the ``type`` tag."""
    cls = type(message)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        raise MalformedMessage(f"not a protocol message: {cls.__name__}")
    obj = {"type": cls.TYPE}
    for name in names:
        obj[name] = getattr(message, name)
    for name, default in _OPTIONAL.get(cls, ()):
        if obj[name] == default:
            del obj[name]  # an older peer knows no such key
    try:
        return orjson.dumps(obj)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise MalformedMessage(f"{cls.TYPE}: cannot encode: {exc}") from exc


_ENVELOPE: tuple[str, ...] = ("sender", "incarnation", "sequence", "timestamp")
_REQUIRED: Any = object()


def _own_fields(cls: type[Any]) -> tuple[tuple[str, Any, Callable[[], Any] | None], ...]:
    """(name, default or _REQUIRED, default factory) of each field after the envelope."""
    out = []
    for f in dataclasses.fields(cls):
        if f.name in _ENVELOPE:
            continue
        factory = None if f.default_factory is dataclasses.MISSING else f.default_factory
        default = _REQUIRED if f.default is dataclasses.MISSING else f.default
        out.append((f.name, default, factory))
    return tuple(out)


_OWN_FIELDS = {cls: _own_fields(cls) for cls in MESSAGE_TYPES}
assert all(names[:4] == _ENVELOPE for names in _FIELD_NAMES.values())  # encode's order


def encode_fields(
    cls: type[Message],
    fields: Mapping[str, Any],
    *,
    sender: str,
    incarnation: str,
    sequence: int,
    timestamp: int,
) -> bytes:
    """What ``encode(cls(sender=..., ..., **fields))`` writes, without the message object.

    The same keys in the same order, defaults filled in as the dataclass would; a field
    ``cls`` lacks, or a required one missing, is MalformedMessage (where the dataclass
    raises TypeError). Building and reading back a frozen dataclass is most of the cost
    of a small reply, and the fleet simulator sends hundreds of thousands per job.
    """
    own = _OWN_FIELDS.get(cls)
    if own is None:
        raise MalformedMessage(f"not a protocol message: {cls.__name__}")
    obj: dict[str, Any] = {
        "type": cls.TYPE,
        "sender": sender,
        "incarnation": incarnation,
        "sequence": sequence,
        "timestamp": timestamp,
    }
    used = 0
    for name, default, factory in own:
        if name in fields:
            obj[name] = fields[name]
            used += 1
        elif factory is not None:
            obj[name] = factory()
        elif default is _REQUIRED:
            raise MalformedMessage(f"{cls.TYPE}: missing {name}")
        else:
            obj[name] = default
    if used != len(fields):
        extra = sorted(set(fields) - {name for name, _, _ in own})
        raise MalformedMessage(f"{cls.TYPE}: unexpected {', '.join(extra)}")
    for name, default in _OPTIONAL.get(cls, ()):
        value = obj[name]
        if value == default or (type(default) is tuple and type(value) is list and not value):
            del obj[name]  # as ``encode``: an older peer knows no such key
    try:
        return orjson.dumps(obj)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise MalformedMessage(f"{cls.TYPE}: cannot encode: {exc}") from exc


def decode(body: bytes) -> Message:
    """Parse and validate a JSON body into its message; anything wrong is MalformedMessage."""
    return _decoded(_loads(body))


def _loads(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"body is not valid JSON: {exc}") from exc


def _decoded(obj: Any) -> Message:
    if type(obj) is not dict:
        raise MalformedMessage(f"body must be a JSON object, got {_kind(obj)}")
    tag = obj.pop("type", None)
    spec = _SPECS.get(tag) if type(tag) is str else None
    if spec is None:
        raise MalformedMessage(f"unknown message type {tag!r}")
    message: Message = spec.build(obj, tag)
    if not 0 < len(message.sender) <= MAX_ID_CHARS:
        raise MalformedMessage(f"{tag}.sender: must be 1 to {MAX_ID_CHARS} characters")
    if not 0 < len(message.incarnation) <= MAX_ID_CHARS:
        raise MalformedMessage(f"{tag}.incarnation: must be 1 to {MAX_ID_CHARS} characters")
    if message.sequence < 0 or message.timestamp < 0:
        raise MalformedMessage(f"{tag}: sequence and timestamp must not be negative")
    return message


# A node heartbeat's fields in ``NodeHeartbeat``'s order: sender, incarnation, sequence,
# timestamp, command_endpoint, job_id, job_state.
Beat = tuple[str, str, int, int, str, str | None, str | None]
_BEAT_TYPE = messages.NodeHeartbeat.TYPE
_BEAT_KEYS = 1 + len(_FIELD_NAMES[messages.NodeHeartbeat])
# decode_beat's checks are written out for exactly these fields, all required: a field
# added to the message must be added there too.
assert _FIELD_NAMES[messages.NodeHeartbeat] == (
    "sender",
    "incarnation",
    "sequence",
    "timestamp",
    "command_endpoint",
    "job_id",
    "job_state",
)
assert not _SPECS[_BEAT_TYPE].defaults


def decode_beat(body: bytes) -> Message | Beat:
    """``decode``, except that a node heartbeat comes back as its fields, a ``Beat``.

    An edge reads tens of thousands of heartbeats a second and needs their fields only:
    building the frozen message object was half the cost of decoding one. The checks
    are ``decode``'s for a heartbeat, written out: exactly the message's keys, each value
    of its exact type (a boolean is no integer), sender and incarnation of 1 to
    ``MAX_ID_CHARS`` characters, sequence and timestamp not negative. A body that fails
    any of them, and every other message, goes through ``decode``'s own path, which
    accepts or refuses it (with its precise reason) exactly as ``decode`` does.
    """
    try:  # ``_loads`` inlined: a call per heartbeat
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"body is not valid JSON: {exc}") from exc
    if type(obj) is dict and len(obj) == _BEAT_KEYS and obj.get("type") == _BEAT_TYPE:
        # With the count right and each of the other seven present, the keys are exact.
        sender = obj.get("sender")
        incarnation = obj.get("incarnation")
        sequence = obj.get("sequence")
        timestamp = obj.get("timestamp")
        endpoint = obj.get("command_endpoint")
        job_id = obj.get("job_id", obj)  # absent is not null: a sentinel no value can be
        job_state = obj.get("job_state", obj)
        if (
            type(sender) is str
            and 0 < len(sender) <= MAX_ID_CHARS
            and type(incarnation) is str
            and 0 < len(incarnation) <= MAX_ID_CHARS
            and type(sequence) is int
            and sequence >= 0
            and type(timestamp) is int
            and timestamp >= 0
            and type(endpoint) is str
            and (job_id is None or type(job_id) is str)
            and (job_state is None or type(job_state) is str)
        ):
            return (sender, incarnation, sequence, timestamp, endpoint, job_id, job_state)
    return _decoded(obj)
