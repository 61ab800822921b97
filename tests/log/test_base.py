"""What every backend shares from ``base``: record sizes and ``append`` as a batch of one."""

from __future__ import annotations

from pushjobs.log.base import AppendByBatch, Batch, Fence, record_bytes


def test_a_record_counts_its_utf8_key_and_its_value():
    assert record_bytes("k", b"123") == 4
    assert record_bytes("é", None) == 2
    assert record_bytes("", b"") == 0


class _Recorder(AppendByBatch):
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, bytes | None]], Fence | None]] = []

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        self.calls.append((topic, list(records), fence))
        return [7]


def test_append_is_a_batch_of_one_with_the_same_fence():
    log = _Recorder()
    assert log.append("jobs", "k", None, fence=Fence("leaders", 2)) == 7
    assert log.append("jobs", "k", b"v") == 7
    assert log.calls == [
        ("jobs", [("k", None)], Fence("leaders", 2)),
        ("jobs", [("k", b"v")], None),
    ]
