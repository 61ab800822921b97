"""What a reader that is behind sheds unread: old heartbeats only, never a reply."""

from __future__ import annotations

from pushjobs.protocol.messages import AckCommit, NodeHeartbeat, Succeeded
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.shedding import stale_heartbeat
from pushjobs.protocol.signing import HmacSigner

T0 = 1_700_000_000_000
NODE = Outbox("n1", "inc", HmacSigner("k1", b"s" * 32))


def test_an_old_heartbeat_is_stale_a_fresh_one_is_not() -> None:
    beat = NODE.frames(NodeHeartbeat, T0, command_endpoint="tcp://127.0.0.1:9")
    assert stale_heartbeat(beat, T0 + 1)
    assert not stale_heartbeat(beat, T0)


def test_a_reply_is_never_stale_whatever_its_age() -> None:
    for frames in (
        NODE.frames(AckCommit, T0, job_id="j1"),
        NODE.frames(Succeeded, T0, job_id="j1", exit_status=0, duration_ms=1),
    ):
        assert not stale_heartbeat(frames, T0 + 3_600_000)


def test_what_is_not_a_heartbeat_is_left_to_the_whole_path() -> None:
    beat = NODE.frames(NodeHeartbeat, T0, command_endpoint="tcp://127.0.0.1:9")
    for frames in (
        [b"v1 hmac k1", b"not json", b"sig"],
        [b"v1 hmac k1", b"[1, 2]", b"sig"],
        [b"v1 hmac k1", b'{"type": "heartbeat", "timestamp": "old"}', b"sig"],
        beat[:2],  # a frame short
        [*beat, b"extra"],
    ):
        assert not stale_heartbeat(frames, T0 + 60_000)
