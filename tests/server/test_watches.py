"""Parked watches: answered on a change, at their deadline, or when the job is gone."""

from __future__ import annotations

from pushjobs.api import methods
from pushjobs.protocol.codec import decode
from pushjobs.protocol.messages import ApiReply, ApiRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HmacSigner
from pushjobs.quorum import Quorum
from server.coordinator import Coordinator
from server.responder import Responder
from server.watches import Watches

T0 = 1_700_000_000_000


def request(job_id: str, version: int, wait_s: float = 10.0, rid: str = "r1") -> ApiRequest:
    params = {"job_id": job_id, "version": version, "wait_s": wait_s}
    return ApiRequest(
        sender="alice",
        incarnation="i",
        sequence=1,
        timestamp=T0,
        request_id=rid,
        method="job.watch",
        params=params,
    )


def replies(responder: Responder) -> list[ApiReply]:
    out = []
    for _identity, frames in responder.take():
        reply = decode(frames[1])
        assert isinstance(reply, ApiReply)
        out.append(reply)
    return out


def coordinator_with_job() -> Coordinator:
    coord = Coordinator()
    coord.submit(
        "j1",
        "true",
        ["a"],
        ["a"],
        T0,
        quorum=Quorum(),
        vote_timeout_ms=1000,
        run_timeout_ms=5000,
        options={},
        requested_by="alice",
    )
    return coord


def test_a_watch_waits_until_its_job_moves_past_the_version_it_saw() -> None:
    coord, watches = coordinator_with_job(), Watches()
    responder = Responder(Outbox("server", "inc", HmacSigner("k", b"s" * 32)))
    watches.park(b"id", request("j1", coord.versions["j1"]), now=100.0)
    assert watches.next_deadline() == 110.0
    watches.answer(coord, 101.0, T0, responder)
    assert replies(responder) == [] and len(watches.parked) == 1
    coord.abort("j1", T0 + 1, "stop")  # a new version
    watches.answer(coord, 101.5, T0, responder)
    [reply] = replies(responder)
    assert reply.ok and reply.request_id == "r1"
    assert reply.result["job"]["state"] == "aborted"
    assert watches.parked == [] and watches.next_deadline() is None


def test_a_watch_is_answered_with_the_unchanged_job_at_its_deadline_capped() -> None:
    coord, watches = coordinator_with_job(), Watches()
    responder = Responder(Outbox("server", "inc", HmacSigner("k", b"s" * 32)))
    watches.park(b"id", request("j1", coord.versions["j1"], wait_s=10_000), now=0.0)
    assert watches.next_deadline() == methods.MAX_WATCH_S
    watches.answer(coord, methods.MAX_WATCH_S, T0, responder)
    [reply] = replies(responder)
    assert reply.ok and reply.result["job"]["state"] == "voting"


def test_a_watch_on_a_job_this_server_does_not_know_is_answered_not_found() -> None:
    watches = Watches()
    responder = Responder(Outbox("server", "inc", HmacSigner("k", b"s" * 32)))
    watches.park(b"id", request("gone", 0), now=0.0)
    watches.answer(Coordinator(), 1.0, T0, responder)
    [reply] = replies(responder)
    assert not reply.ok and reply.error is not None
    assert reply.error.code == methods.NOT_FOUND
    assert reply.error.message == "no job 'gone'"
