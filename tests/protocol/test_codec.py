from __future__ import annotations

import dataclasses

import orjson
import pytest

from pushjobs.errors import MalformedMessage
from pushjobs.protocol import messages as m
from pushjobs.protocol.codec import decode, encode, encode_fields
from tests.protocol.samples import SAMPLES


def test_samples_cover_every_message_type():
    assert {type(s) for s in SAMPLES} == set(m.MESSAGE_TYPES)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda s: type(s).TYPE)
def test_round_trip(message):
    body = encode(message)
    assert orjson.loads(body)["type"] == type(message).TYPE
    assert decode(body) == message


def _body(message, **changes):
    obj = orjson.loads(encode(message))
    for key, value in changes.items():
        if value is _DELETE:
            del obj[key]
        else:
            obj[key] = value
    return orjson.dumps(obj)


_DELETE = object()
HEARTBEAT = SAMPLES[1]
COMMIT = SAMPLES[13]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
        (b"{}", "unknown message type None"),
        (b'{"type": "launch_missiles"}', "unknown message type 'launch_missiles'"),
        (b'{"type": 5}', "unknown message type 5"),
        (_body(HEARTBEAT, sender=_DELETE), "missing sender"),
        (_body(HEARTBEAT, job_id=_DELETE), "missing job_id"),
        (_body(HEARTBEAT, extra=1), "unexpected extra"),
        (_body(HEARTBEAT, sequence="7"), "sequence: expected integer, got str"),
        (_body(HEARTBEAT, sequence=True), "sequence: expected integer, got bool"),
        (_body(HEARTBEAT, sequence=7.0), "sequence: expected integer, got float"),
        (_body(HEARTBEAT, timestamp=None), "timestamp: expected integer, got null"),
        (_body(HEARTBEAT, sender=1), "sender: expected string, got int"),
        (_body(HEARTBEAT, job_id=3), "job_id: expected null or string, got int"),
        (_body(HEARTBEAT, sender=""), "sender: must be 1 to"),
        (_body(HEARTBEAT, sender="x" * 300), "sender: must be 1 to"),
        (_body(HEARTBEAT, incarnation=""), "incarnation: must be 1 to"),
        (_body(HEARTBEAT, sequence=-1), "must not be negative"),
        (_body(SAMPLES[0], leader=1), "leader: expected boolean, got int"),
        (_body(COMMIT, options=[]), "options: expected an object, got list"),
        (_body(COMMIT, options={"timeout_s": 1}), "missing"),
        (
            _body(COMMIT, options={**orjson.loads(encode(COMMIT))["options"], "timeout_s": "1"}),
            "timeout_s: expected a number",
        ),
        (
            _body(COMMIT, options={**orjson.loads(encode(COMMIT))["options"], "env": {"A": 1}}),
            "env.A: expected string",
        ),
        (_body(SAMPLES[18], tags="web"), "tags: expected an array"),
        (_body(SAMPLES[18], tags=["web", 1]), "tags[1]: expected string"),
        (_body(SAMPLES[19], status="maybe"), "status: expected one of"),
        (_body(SAMPLES[21], params=[]), "params: expected an object"),
    ],
)
def test_rejects(body, needle):
    with pytest.raises(MalformedMessage) as info:
        decode(body)
    assert needle in str(info.value)


def test_float_field_accepts_integer_json():
    obj = orjson.loads(encode(COMMIT))
    obj["options"]["timeout_s"] = 30
    decoded = decode(orjson.dumps(obj))
    assert isinstance(decoded, m.Commit)
    assert decoded.options.timeout_s == 30.0
    assert type(decoded.options.timeout_s) is float


def test_decoded_messages_are_frozen():
    decoded = decode(encode(HEARTBEAT))
    with pytest.raises(AttributeError):
        decoded.sequence = 8  # type: ignore[misc]


def test_encode_refuses_values_json_cannot_carry():
    bad = m.ApiReply(
        sender="s", incarnation="i", sequence=1, timestamp=1, request_id="r", ok=True, result={1, 2}
    )
    with pytest.raises(MalformedMessage, match="cannot encode"):
        encode(bad)


def test_decode_error_is_chained_to_its_cause():
    with pytest.raises(MalformedMessage) as info:
        decode(b"{nope")
    assert isinstance(info.value.__cause__, orjson.JSONDecodeError)


ENVELOPE_NAMES = ("sender", "incarnation", "sequence", "timestamp")


@pytest.mark.parametrize("message", SAMPLES, ids=lambda s: type(s).TYPE)
def test_encode_fields_writes_what_encode_writes(message):
    # Given only the fields that differ from their defaults, as the simulator gives them.
    cls = type(message)
    defaults = cls(**{n: getattr(message, n) for n in ENVELOPE_NAMES}, **_required(message))
    fields = {
        f.name: getattr(message, f.name)
        for f in dataclasses.fields(message)
        if f.name not in ENVELOPE_NAMES and getattr(message, f.name) != getattr(defaults, f.name)
    }
    fields.update(_required(message))
    envelope = {n: getattr(message, n) for n in ENVELOPE_NAMES}
    assert encode_fields(cls, fields, **envelope) == encode(message)


def _required(message):
    return {
        f.name: getattr(message, f.name)
        for f in dataclasses.fields(message)
        if f.name not in ENVELOPE_NAMES
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    }


def test_encode_fields_refuses_what_the_dataclass_would():
    envelope = {"sender": "n", "incarnation": "i", "sequence": 1, "timestamp": 2}
    with pytest.raises(MalformedMessage, match="missing job_id"):
        encode_fields(m.AckCommit, {}, **envelope)
    with pytest.raises(MalformedMessage, match="unexpected sender"):
        encode_fields(m.AckCommit, {"job_id": "j", "sender": "x"}, **envelope)
    with pytest.raises(MalformedMessage, match="not a protocol message"):
        encode_fields(m.JobOutput, {}, **envelope)  # type: ignore[arg-type]
    with pytest.raises(MalformedMessage, match="cannot encode"):
        encode_fields(m.AckCommit, {"job_id": object()}, **envelope)


def test_an_optional_field_is_left_off_when_default_and_read_as_default_when_missing() -> None:
    """Issue 27's ``left_running``: an older peer never sees the key unless it matters, and
    a newer one reads an older peer's message."""
    from pushjobs.protocol import codec
    from pushjobs.protocol.messages import Failed

    base = {"sender": "n", "incarnation": "i", "sequence": 1, "timestamp": 1}
    plain = Failed(**base, job_id="j", exit_status=None, reason="r", duration_ms=3)
    body = codec.encode(plain)
    assert b"left_running" not in body
    assert codec.decode(body) == plain
    left = Failed(**base, job_id="j", exit_status=1, reason="r", duration_ms=3, left_running=("x",))
    assert codec.decode(codec.encode(left)) == left
    with pytest.raises(MalformedMessage, match="left_running"):
        codec.decode(codec.encode(left).replace(b'["x"]', b'"x"'))
