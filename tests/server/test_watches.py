"""Parked watches: answered on a change, at their deadline, or when the job is gone."""

from __future__ import annotations

from pushjobs.api import methods
from pushjobs.errors import ApiError
from pushjobs.protocol.codec import decode
from pushjobs.protocol.messages import ApiReply, ApiRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HmacSigner
from pushjobs.quorum import Quorum
from server.core.coordinator import Coordinator
from server.front.responder import Responder
from server.front.watches import Watches

T0 = 1_700_000_000_000


def request(
    job_id: str, version: int, wait_s: float = 10.0, rid: str = "r1", incarnation: str = "i"
) -> ApiRequest:
    params = {"job_id": job_id, "version": version, "wait_s": wait_s}
    return ApiRequest(
        sender="alice",
        incarnation=incarnation,
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


def _responder() -> Responder:
    return Responder(Outbox("server", "inc", HmacSigner("k", b"s" * 32)))


def test_watches_over_the_per_client_cap_are_refused_busy_and_others_still_park() -> None:
    coord, watches = coordinator_with_job(), Watches(max_per_client=2, max_total=3)
    version = coord.versions["j1"]
    watches.park(b"id", request("j1", version, rid="1"), now=0.0)
    watches.park(b"id", request("j1", version, rid="2"), now=0.0)
    try:
        watches.park(b"id", request("j1", version, rid="3"), now=0.0)
    except ApiError as exc:
        assert exc.code == methods.BUSY and "2 per client" in str(exc)
    else:
        raise AssertionError("a third watch of one client was parked")
    watches.park(b"id2", request("j1", version, rid="4", incarnation="other"), now=0.0)
    try:
        watches.park(b"id3", request("j1", version, rid="5", incarnation="third"), now=0.0)
    except ApiError as exc:
        assert exc.code == methods.BUSY and "3 on this server" in str(exc)
    else:
        raise AssertionError("a watch over the server's total was parked")
    assert watches.count == 3 and watches.refused == 2
    responder = _responder()
    coord.abort("j1", T0 + 1, "stop")
    watches.answer(coord, 1.0, T0, responder)
    assert sorted(r.request_id for r in replies(responder)) == ["1", "2", "4"]
    # Answered watches free their slots.
    assert watches.count == 0 and watches.per_client == {}
    watches.park(b"id", request("j1", coord.versions["j1"], rid="6"), now=2.0)
    assert watches.count == 1


def test_a_turn_looks_only_at_the_jobs_that_changed() -> None:
    coord, watches = coordinator_with_job(), Watches(max_per_client=10_000, max_total=10_000)
    version = coord.versions["j1"]
    for n in range(5_000):
        watches.park(b"id", request("j1", version, rid=str(n)), now=0.0)
    responder = _responder()
    watches.answer(coord, 0.5, T0, responder)  # the first turn sees the new coordinator
    # Later turns with nothing changed must not touch any watch: make them unanswerable
    # (a view of them would raise) and check nothing was looked at.
    coord.take_touched()
    del coord.versions["j1"]
    watches.answer(coord, 1.0, T0, responder)
    assert replies(responder) == [] and watches.count == 5_000


def test_a_forgotten_job_answers_its_watches_not_found() -> None:
    coord, watches = Coordinator(keep_finished=1), Watches()
    for job_id in ("j1", "j2"):
        coord.submit(
            job_id,
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
    responder = _responder()
    coord.abort("j1", T0 + 1, "stop")
    watches.park(b"id", request("j1", coord.versions["j1"]), now=0.0)
    watches.answer(coord, 0.1, T0, responder)
    assert replies(responder) == []
    coord.abort("j2", T0 + 2, "stop")  # j1, the older finished job, is forgotten
    watches.answer(coord, 0.2, T0, responder)
    [reply] = replies(responder)
    assert reply.error is not None and reply.error.code == methods.NOT_FOUND


def test_a_server_that_stops_leading_answers_every_parked_watch_not_leader() -> None:
    coord = coordinator_with_job()
    watches = Watches()
    responder = Responder(Outbox("s", "i", HmacSigner("k", b"x" * 32)))
    seen = coord.versions["j1"]
    watches.park(b"id1", request("j1", seen, rid="r1"), now=0.0)
    watches.park(b"id2", request("j1", seen, rid="r2", incarnation="other"), now=0.0)
    watches.answer(coord, 0.0, T0, responder)
    assert replies(responder) == []  # the job has not moved: both stay parked
    # Deposed: a fresh, empty coordinator; the job lives on at the leader.
    watches.answer(Coordinator(), 1.0, T0, responder, leading=False, leader_api=lambda: "tcp://b")
    answered = replies(responder)
    assert sorted(r.request_id for r in answered) == ["r1", "r2"]
    for reply in answered:
        assert not reply.ok and reply.error is not None
        assert reply.error.code == methods.NOT_LEADER
        assert reply.error.leader == "tcp://b"
    assert watches.count == 0 and watches.parked == [] and watches.per_client == {}
    assert watches.next_deadline() is None
