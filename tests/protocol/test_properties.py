"""Property tests: nothing but our own errors escapes decoding, and round trips hold."""

from __future__ import annotations

import contextlib
import os

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from pushjobs.errors import MalformedMessage, ProtocolError
from pushjobs.protocol import framing, signing
from pushjobs.protocol.codec import decode, encode
from tests.protocol.samples import SAMPLES
from tests.protocol.strategies import any_message, json_value

KEY = os.urandom(32)
SIGNER = signing.HmacSigner("k1", KEY)


def resolve(method, key_id):
    return signing.HmacVerifier(KEY)


@given(any_message)
def test_round_trip_generated_messages(message):
    assert decode(encode(message)) == message


@given(any_message)
def test_sealed_generated_messages_open(message):
    frames = framing.seal(message, SIGNER, framing.Limits(max_body_bytes=1 << 20))
    opened = framing.open_frames(frames, resolve, framing.Limits(max_body_bytes=1 << 20))
    assert opened == message


@given(st.binary(max_size=512))
def test_decode_arbitrary_bytes_raises_only_our_error(body):
    with contextlib.suppress(MalformedMessage):
        decode(body)


@given(json_value)
def test_decode_arbitrary_json_raises_only_our_error(value):
    with contextlib.suppress(MalformedMessage):
        decode(orjson.dumps(value))


@given(st.sampled_from(SAMPLES), st.text(max_size=12), json_value)
def test_decode_mutated_messages_raises_only_our_error(message, key, value):
    obj = orjson.loads(encode(message))
    obj[key] = value
    try:
        decoded = decode(orjson.dumps(obj))
    except MalformedMessage:
        return
    assert type(decoded) in {type(s) for s in SAMPLES}


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=300), max_size=5))
def test_open_arbitrary_frames_raises_only_protocol_errors(frames):
    with contextlib.suppress(ProtocolError):
        framing.open_frames(frames, resolve)


@given(st.sampled_from(SAMPLES), st.integers(0, 2), st.integers(0, 10_000), st.integers(1, 255))
def test_any_single_byte_change_is_refused(message, frame_index, position, flip):
    frames = framing.seal(message, SIGNER)
    target = bytearray(frames[frame_index])
    target[position % len(target)] ^= flip
    frames[frame_index] = bytes(target)
    try:
        framing.open_frames(frames, resolve)
    except ProtocolError:
        return
    raise AssertionError("a tampered frame was accepted")
