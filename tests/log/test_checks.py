"""The argument checks every backend shares (pure, one test per check)."""

from __future__ import annotations

import pytest

from pushjobs.errors import FencedError, LogError, OffsetOutOfRange, RecordTooLarge
from pushjobs.log.base import Fence, TopicPolicy
from pushjobs.log.checks import (
    check_commit_offset,
    check_commit_start,
    check_epoch,
    check_not_past_end,
    check_policy,
    check_read_offset,
    check_read_start,
    check_records,
    check_value_size,
    session_ms,
)


def test_session_timeouts_must_be_positive():
    assert session_ms(0.0004) == 1
    assert session_ms(1.5) == 1500
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(LogError):
            session_ms(bad)


def test_record_checks():
    check_records("t", [("k", b"1234"), ("k", None)], 4)
    with pytest.raises(RecordTooLarge, match="5 bytes"):
        check_records("t", [("k", b"12345")], 4)
    with pytest.raises(LogError, match="key must be a str"):
        check_records("t", [(b"k", b"v")], 4)
    with pytest.raises(LogError, match="bytes or None"):
        check_records("t", [("k", "text")], 4)


def test_record_checks_stop_at_the_first_bad_record_in_order():
    with pytest.raises(RecordTooLarge):
        check_records("t", [("k", b"12345"), (b"k", b"v")], 4)


def test_value_size_check_alone_names_the_key_and_the_limit():
    check_value_size("t", "k", b"1234", 4)
    check_value_size("t", "k", None, 0)
    with pytest.raises(
        RecordTooLarge, match=r"^t: value of 5 bytes for key 'k' is over the 4-byte"
    ):
        check_value_size("t", "k", b"12345", 4)


def test_policy_checks():
    check_policy("t", TopicPolicy(retention_ms=0, retention_bytes=0))
    with pytest.raises(LogError, match="retention_bytes"):
        check_policy("t", TopicPolicy(retention_bytes=-1))


@pytest.mark.parametrize(
    ("check", "negative"),
    [
        (check_read_offset, "negative offset -1"),
        (check_commit_offset, "cannot commit negative offset -1"),
    ],
)
def test_offsets_run_from_zero_to_the_end_inclusive(check, negative):
    check("t", 0, 0)
    check("t", 2, 2)
    with pytest.raises(OffsetOutOfRange, match=f"^t: {negative}$"):
        check("t", -1, 2)
    with pytest.raises(OffsetOutOfRange, match=r"^t: offset 3 is past the end 2$"):
        check("t", 3, 2)


def test_the_sign_and_the_end_can_be_checked_apart():
    # The Kafka backend checks the sign before it asks the cluster for the end.
    check_read_start("t", 0)
    check_commit_start("t", 0)
    check_not_past_end("t", 5, 5)
    with pytest.raises(OffsetOutOfRange, match="negative offset"):
        check_read_start("t", -1)
    with pytest.raises(OffsetOutOfRange, match="cannot commit negative"):
        check_commit_start("t", -1)
    with pytest.raises(OffsetOutOfRange, match="past the end"):
        check_not_past_end("t", 6, 5)


def test_only_the_current_epoch_passes_the_fence():
    assert check_epoch("t", Fence("leaders", 4), 4) == 4
    for current in (3, 5):
        with pytest.raises(
            FencedError,
            match=f"^t: epoch 4 is stale: the current epoch of group 'leaders' is {current}$",
        ):
            check_epoch("t", Fence("leaders", 4), current)
