"""The edge's heartbeat fast path (``decode_beat``, ``open_beat``, ``Inbox.accept_beat``)
accepts exactly what the general path accepts, with the same fields, and drops exactly
what it drops, for the same reason."""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pushjobs.errors import MalformedMessage, ProtocolError, UnknownKey
from pushjobs.protocol import codec, framing, signing
from pushjobs.protocol.inbox import Inbox, Received
from pushjobs.protocol.messages import AckCommit, NodeHeartbeat
from tests.protocol.samples import SAMPLES
from tests.protocol.strategies import json_value

KEY = os.urandom(32)
NOW_MS = 1_700_000_000_000
GOOD = {
    "type": "node_heartbeat",
    "sender": "node-1",
    "incarnation": "inc-1",
    "sequence": 7,
    "timestamp": NOW_MS,
    "command_endpoint": "tcp://10.0.0.1:5555",
    "job_id": None,
    "job_state": None,
}
FIELDS = tuple(k for k in GOOD if k != "type")


def fields(message: NodeHeartbeat) -> codec.Beat:
    return (
        message.sender,
        message.incarnation,
        message.sequence,
        message.timestamp,
        message.command_endpoint,
        message.job_id,
        message.job_state,
    )


def both(body: bytes) -> None:
    """``decode_beat`` agrees with ``decode`` on ``body``: same result, or same refusal."""
    try:
        general = codec.decode(body)
    except MalformedMessage as exc:
        with pytest.raises(MalformedMessage) as fast:
            codec.decode_beat(body)
        assert str(fast.value) == str(exc)
        return
    fast_result = codec.decode_beat(body)
    if isinstance(general, NodeHeartbeat):
        assert type(fast_result) is tuple
        assert fast_result == fields(general)
        assert [type(v) for v in fast_result] == [type(v) for v in fields(general)]
    else:
        assert fast_result == general


def body(**changes: object) -> bytes:
    obj = {**GOOD, **changes}
    return orjson.dumps({k: v for k, v in obj.items() if v is not DROP})


DROP = object()

HOSTILE = [
    body(),
    body(job_id="job-1", job_state="running"),
    body(extra=1),  # a key too many
    body(job_state=DROP, extra=None),  # right count, wrong keys
    body(job_state=DROP),  # a key short
    body(job_id=DROP, job_state=DROP),
    body(sequence=True),  # a boolean is no integer
    body(timestamp=False),
    body(sequence=1.0),
    body(sequence="7"),
    body(sequence=-1),
    body(timestamp=-5),
    body(sequence=2**63 - 1),  # the largest orjson reads as an integer
    body(sender=""),
    body(sender="x" * codec.MAX_ID_CHARS),
    body(sender="x" * (codec.MAX_ID_CHARS + 1)),
    body(incarnation=""),
    body(incarnation="é" * (codec.MAX_ID_CHARS + 1)),
    body(sender=None),
    body(sender=7),
    body(sender=["node-1"]),
    body(command_endpoint=None),
    body(command_endpoint=1),
    body(job_id=5),
    body(job_state=True),
    body(job_id={"id": "x"}),
    body(type="node_heartbeatx"),  # looks like one, is not
    body(type="ack_commit"),
    body(type="server_heartbeat"),
    body(type=None),
    body(type=DROP, extra=1),
    orjson.dumps({**{k: GOOD[k] for k in reversed(GOOD)}}),  # key order is free
    b'{"type":"node_heartbeat","sender":"node-1","sender":"node-2","incarnation":"i",'
    b'"sequence":1,"timestamp":1,"command_endpoint":"e","job_id":null,"job_state":null}',
    b'{"type":"node_heartbeat","sequence":18446744073709551616}',  # beyond 64 bits
    b'{"type":"node_heartbeat","sender":"a","incarnation":"i","sequence":1e3,'
    b'"timestamp":1,"command_endpoint":"e","job_id":null,"job_state":null}',
    b"[]",
    b'"node_heartbeat"',
    b"null",
    b"{",
    b"",
    b"\xff\xfe",
    orjson.dumps({"type": "ack_commit", **{k: GOOD[k] for k in FIELDS[:4]}, "job_id": "j"}),
    *(codec.encode(sample) for sample in SAMPLES),
]


@pytest.mark.parametrize("raw", HOSTILE)
def test_fast_and_general_decode_agree(raw: bytes) -> None:
    both(raw)


def test_a_good_heartbeat_is_its_fields() -> None:
    assert codec.decode_beat(body(job_id="j", job_state="running")) == (
        "node-1",
        "inc-1",
        7,
        NOW_MS,
        "tcp://10.0.0.1:5555",
        "j",
        "running",
    )


@settings(max_examples=200, deadline=None)
@given(
    values=st.fixed_dictionaries({k: json_value for k in FIELDS}),
    keep=st.lists(st.booleans(), min_size=len(FIELDS), max_size=len(FIELDS)),
    extra=st.dictionaries(st.sampled_from(["x", "type2", "job", "Sender"]), json_value, max_size=2),
    tag=st.sampled_from(["node_heartbeat", "node_heartbeat", "ack_commit", "nodeheartbeat"]),
)
def test_any_mutated_heartbeat_decodes_the_same_on_both_paths(values, keep, extra, tag) -> None:
    obj = {
        "type": tag,
        **{k: v for (k, v), kept in zip(values.items(), keep, strict=True) if kept},
        **extra,
    }
    both(orjson.dumps(obj))


@settings(max_examples=300, deadline=None)
@given(
    sender=st.one_of(st.text(max_size=300), st.integers(0, 2**64 - 1), st.none()),
    sequence=st.one_of(st.integers(min_value=-(2**63), max_value=2**64 - 1), st.booleans()),
    job_id=st.one_of(st.none(), st.text(max_size=5), st.integers(-(2**63), 2**63 - 1)),
)
def test_mutated_envelope_decodes_the_same_on_both_paths(sender, sequence, job_id) -> None:
    both(body(sender=sender, sequence=sequence, job_id=job_id))


# --- framing and the inbox -------------------------------------------------------------


def resolver(owner: str = "node-1"):
    verifier = signing.HmacVerifier(KEY, owner=owner)

    def resolve(method: str, key_id: str):
        if (method, key_id) != ("hmac-sha256", "node-1.s1"):
            raise UnknownKey(f"no {method} key {key_id}")
        return verifier

    return resolve


def sealed(raw: bytes, key_id: str = "node-1.s1", key: bytes = KEY) -> list[bytes]:
    header = f"PJ1 hmac-sha256 {key_id}".encode()
    return [header, raw, signing.HmacSigner(key_id, key).sign(header + b"\n" + raw)]


def opened_both(frames: list[bytes], resolve) -> None:
    try:
        general = framing.open_frames(frames, resolve)
    except ProtocolError as exc:
        with pytest.raises(type(exc)) as fast:
            framing.open_beat(frames, resolve)
        assert str(fast.value) == str(exc)
        return
    fast_result = framing.open_beat(frames, resolve)
    if isinstance(general, NodeHeartbeat):
        assert fast_result == fields(general)
    else:
        assert fast_result == general


FRAMES = [
    *(sealed(raw) for raw in HOSTILE),
    sealed(body(sender="node-2")),  # a valid key, not the sender's
    sealed(body(), key=os.urandom(32)),  # signed with another key
    sealed(body(), key_id="node-2.s1"),  # a key nobody holds
    [b"PJ1 hmac-sha256 node-1.s1", body(), b"x" * 32],
    [b"PJ1 hmac-sha256 node-1.s1", body(), b"x" * 31],
    [b"PJ2 hmac-sha256 node-1.s1", body(), b"x" * 32],
    [b"PJ1 hmac-sha256 node-1.s1", body()],
    [b"PJ1 hmac-sha256 node-1.s1", b"x" * 70_000, b"x" * 32],
    sealed(orjson.dumps({**GOOD, "sender": "node-2"})),
    sealed(
        codec.encode(
            AckCommit(sender="node-1", incarnation="i", sequence=1, timestamp=1, job_id="j")
        )
    ),
]


@pytest.mark.parametrize("frames", FRAMES)
def test_fast_and_general_open_agree(frames) -> None:
    opened_both(frames, resolver())


def test_a_valid_key_cannot_speak_for_another_node_on_the_fast_path() -> None:
    with pytest.raises(framing.SignatureError, match="does not belong to sender 'node-2'"):
        framing.open_beat(sealed(body(sender="node-2")), resolver())


def test_the_inbox_drops_the_same_on_both_paths() -> None:
    """The same stream through ``accept`` and ``accept_beat``: same verdicts, same drop
    counts by reason, the same replay and restart decisions."""
    stream = [
        *FRAMES,
        sealed(body(sequence=8)),
        sealed(body(sequence=8)),  # a replay
        sealed(body(sequence=7)),  # older
        sealed(body(sequence=9, timestamp=NOW_MS + 3_600_000)),  # clock skew
        sealed(body(sequence=10, incarnation="inc-2")),  # a restart
        sealed(body(sequence=1, incarnation="inc-1")),  # a retired incarnation
        sealed(body(sequence=11, incarnation="inc-2", job_id="j", job_state="running")),
    ]
    general, fast = Inbox(resolver(), 30.0), Inbox(resolver(), 30.0)
    for frames in stream:
        want = general.accept(frames, NOW_MS)
        got = fast.accept_beat(frames, NOW_MS)
        assert fast.drops == general.drops
        if want is None:
            assert got is None
            assert fast.last_error == general.last_error
        elif isinstance(want.message, NodeHeartbeat):
            assert got == (fields(want.message), want.restarted)
        else:
            assert isinstance(got, Received) and got == want
    assert sum(general.drops.values()) > 10 and general.replay.current("node-1") == ("inc-2", 11)
    assert fast.replay.current("node-1") == ("inc-2", 11)


def test_verify_frames_is_verify_of_the_concatenation() -> None:
    verifier = signing.HmacVerifier(KEY)
    for frames in [*FRAMES[:5], sealed(body(), key_id="other.s1")]:
        if len(frames) != 3:
            continue
        header, raw, signature = frames
        try:
            verifier.verify(header + b"\n" + raw, signature)
        except signing.SignatureError:
            with pytest.raises(signing.SignatureError):
                verifier.verify_frames(header, raw, signature)
        else:
            verifier.verify_frames(header, raw, signature)
    # A header moved onto another body, or a body onto another header, never verifies.
    header, raw, signature = sealed(body())
    with pytest.raises(signing.SignatureError):
        verifier.verify_frames(header + b"x", raw, signature)
    with pytest.raises(signing.SignatureError):
        verifier.verify_frames(header, raw + b" ", signature)
    with pytest.raises(signing.SignatureError):
        verifier.verify_frames(header[:-1], header[-1:] + b"\n" + raw, signature)
