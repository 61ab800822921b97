"""The ZAP policy: CURVE only, one check per domain, everything else refused."""

from __future__ import annotations

import threading

import zmq

from pushjobs.transport.sockets import Transport, bound_endpoint
from pushjobs.transport.zap import by_key, decide
from tests.support import curve_keys

FRIEND_PUBLIC, _ = zmq.curve_keypair()
FRIEND_RAW = zmq.utils.z85.decode(FRIEND_PUBLIC)


def request(*, domain=b"d1", mechanism=b"CURVE", credentials=(FRIEND_RAW,), version=b"1.0"):
    return [version, b"req-7", domain, b"127.0.0.1", b"", mechanism, *credentials]


CHECKS = {b"d1": by_key(lambda key: key == FRIEND_PUBLIC.decode())}


def status(reply: list[bytes]) -> tuple[bytes, bytes]:
    assert reply[0] == b"1.0" and len(reply) == 6
    return reply[1], reply[2]


def test_the_allowed_key_is_admitted_with_its_key_as_user_id():
    reply = decide(request(), CHECKS)
    assert status(reply) == (b"req-7", b"200")
    assert reply[4] == FRIEND_PUBLIC


def test_another_key_is_refused():
    other, _ = zmq.curve_keypair()
    reply = decide(request(credentials=(zmq.utils.z85.decode(other),)), CHECKS)
    assert status(reply) == (b"req-7", b"400")
    assert reply[4] == b""


def test_anything_but_a_well_formed_curve_request_for_a_known_domain_is_refused():
    plain = request(mechanism=b"PLAIN", credentials=(b"u", b"p"))
    assert status(decide(plain, CHECKS))[1] == b"400"
    assert status(decide(request(mechanism=b"NULL", credentials=()), CHECKS))[1] == b"400"
    assert status(decide(request(credentials=(b"short",)), CHECKS))[1] == b"400"
    assert status(decide(request(domain=b"elsewhere"), CHECKS))[1] == b"400"
    assert status(decide(request(version=b"2.0"), CHECKS))[1] == b"500"
    assert decide([b"1.0"], CHECKS)[2] == b"500"
    assert decide([], CHECKS)[:3] == [b"1.0", b"", b"500"]


def test_a_check_that_raises_refuses():
    def broken(key: str, address: str) -> int:
        raise RuntimeError("registry unreadable")

    assert status(decide(request(), {b"d1": broken}))[1] == b"400"


def test_a_peer_check_sees_the_address_and_may_refuse_for_now():
    seen = []

    def busy(key: str, address: str) -> int:
        seen.append((key, address))
        return 300

    reply = decide(request(), {b"d1": busy})
    assert status(reply) == (b"req-7", b"300") and reply[4] == b""
    assert seen == [(FRIEND_PUBLIC.decode(), "127.0.0.1")]


def pusher(transport: Transport, target: zmq.Socket[bytes], client, server) -> zmq.Socket[bytes]:
    """A CurveZMQ client of ``server`` connected to ``target``."""
    return transport.socket(
        "push", connect=bound_endpoint(target), curve_client=client, server_public=server.public
    )


def test_domains_added_while_the_handler_runs_are_each_checked():
    with Transport() as transport:
        server, client = curve_keys(), curve_keys()
        refusing = transport.socket(
            "pull", bind="tcp://127.0.0.1:*", curve_server=server, allowed_clients=lambda k: False
        )
        admitting = transport.socket(
            "pull",
            bind="tcp://127.0.0.1:*",
            curve_server=server,
            allowed_clients=lambda k: k == client.public,
        )
        for target in (refusing, admitting):
            pusher(transport, target, client, server).send(b"hello")
        assert admitting.poll(5000) and admitting.recv() == b"hello"
        assert refusing.poll(300) == 0  # bounded: absence is what is asserted


def test_the_handler_survives_a_failing_decision(monkeypatch):
    import pushjobs.transport.zap as zap

    server, broken, client = curve_keys(), curve_keys(), curve_keys()
    broken_raw = zmq.utils.z85.decode(broken.public)
    called = threading.Event()

    def boom_for_one_key(request, checks):
        # Only the broken client's handshakes fail, for the whole test: its retries (libzmq
        # reconnects, and closing a socket is asynchronous) can never be admitted later.
        if request[6:] == [broken_raw]:
            called.set()
            raise RuntimeError("a bug in the policy")
        return decide(request, checks)

    monkeypatch.setattr(zap, "decide", boom_for_one_key)
    with Transport() as transport:
        pull = transport.socket(
            "pull", bind="tcp://127.0.0.1:*", curve_server=server, allowed_clients=lambda k: True
        )
        pusher(transport, pull, broken, server).send(b"while broken")
        assert called.wait(10)
        pusher(transport, pull, client, server).send(b"after")
        assert pull.poll(5000) and pull.recv() == b"after"
        assert pull.poll(300) == 0  # bounded: the failing handshake admitted nobody


def test_a_failing_decision_is_answered_500_with_its_request_id(monkeypatch):
    import pushjobs.transport.zap as zap

    def boom(request, checks):
        raise RuntimeError("a bug in the policy")

    monkeypatch.setattr(zap, "decide", boom)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    handler = zap.ZapHandler(context)
    asker = context.socket(zmq.REQ)
    try:
        asker.connect(zap.ZAP_ENDPOINT)
        asker.send_multipart(request())
        assert asker.poll(5000)
        # libzmq takes a reply without the request's id for a protocol error.
        assert asker.recv_multipart()[:3] == [b"1.0", b"req-7", b"500"]
    finally:
        asker.close(linger=0)
        handler.stop()
        context.term()
