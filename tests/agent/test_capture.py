from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.capture import TailBuffer


def test_short_output_is_kept_whole():
    buf = TailBuffer(10)
    buf.write(b"abc")
    buf.write(b"def")
    assert (buf.text(), buf.truncated, buf.total) == ("abcdef", False, 6)


def test_overflow_keeps_the_tail():
    buf = TailBuffer(5)
    buf.write(b"0123")
    buf.write(b"456789")
    assert (buf.text(), buf.truncated, buf.total) == ("56789", True, 10)


def test_exactly_full_is_not_truncated():
    buf = TailBuffer(4)
    buf.write(b"abcd")
    assert buf.text() == "abcd" and not buf.truncated


def test_zero_limit_keeps_nothing_but_counts():
    buf = TailBuffer(0)
    buf.write(b"abc")
    assert buf.text() == "" and buf.truncated and buf.total == 3


def test_cut_multibyte_character_does_not_fail():
    buf = TailBuffer(3)
    buf.write("é€".encode())  # 2 + 3 bytes
    assert buf.text() == "€" and buf.truncated


def test_negative_limit():
    with pytest.raises(ValueError):
        TailBuffer(-1)


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(0, 64))
def test_equals_the_tail_of_everything_written(chunks, limit):
    buf = TailBuffer(limit)
    for chunk in chunks:
        buf.write(chunk)
    everything = b"".join(chunks)
    kept = everything[-limit:] if limit else b""
    assert buf._data == kept
    assert buf.truncated == (len(everything) > len(kept))
