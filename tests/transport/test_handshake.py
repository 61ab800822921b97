"""Handshake monitoring: the pure parse and tally, then real CurveZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
import zmq

from pushjobs.errors import TransportError
from pushjobs.transport.handshake import (
    CRYPTOGRAPHIC,
    MISMATCH,
    Event,
    HandshakeMonitor,
    HandshakeTally,
    Refusal,
    connect_monitored,
    parse,
)
from pushjobs.transport.sockets import Transport, bound_endpoint
from tests.support import curve_keys, wait_until

ANY_PORT = "tcp://127.0.0.1:*"
FAILED = int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
OK = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)


def frames(event: int, value: int, endpoint: bytes = b"tcp://127.0.0.1:1") -> list[bytes]:
    return [struct.pack("=Hi", event, value), endpoint]


def test_parse_reads_event_value_and_endpoint() -> None:
    event = parse(frames(int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL), CRYPTOGRAPHIC))
    assert event == Event(
        int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL), CRYPTOGRAPHIC, "tcp://127.0.0.1:1"
    )


@pytest.mark.parametrize("bad", [[], [b"x"], [b"12345", b"e"], [b"1234567", b"e"], [b"123456"]])
def test_parse_refuses_what_is_not_a_monitor_message(bad: list[bytes]) -> None:
    assert parse(bad) is None


def test_one_failure_is_not_yet_a_refusal_two_in_a_row_are() -> None:
    tally = HandshakeTally()
    assert tally.see(Event(FAILED, 32, "e")) == Refusal("closed", 32, "e")
    assert tally.refused is None
    tally.see(Event(FAILED, 32, "e"))
    assert tally.refused == Refusal("closed", 32, "e")


@pytest.mark.parametrize(
    ("event", "kind"),
    [(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, "protocol"), (zmq.EVENT_HANDSHAKE_FAILED_AUTH, "auth")],
)
def test_a_protocol_or_zap_failure_is_a_refusal_at_once(event: int, kind: str) -> None:
    tally = HandshakeTally()
    tally.see(Event(int(event), 400, "e"))
    assert tally.refused == Refusal(kind, 400, "e")


def test_a_success_between_failures_starts_the_count_again() -> None:
    tally = HandshakeTally()
    tally.see(Event(FAILED, 32, "e"))
    assert tally.see(Event(OK, 0, "e")) is None
    tally.see(Event(FAILED, 32, "e"))
    assert tally.refused is None


def test_other_events_change_nothing() -> None:
    tally = HandshakeTally(needed=1)
    assert tally.see(Event(int(zmq.EVENT_CONNECTED), 5, "e")) is None
    assert tally.refused is None and tally.failures == 0


def test_causes_name_the_likely_mistake() -> None:
    assert "wrong key" in Refusal("closed", 32, "e").cause()
    assert "does not speak CurveZMQ" in Refusal("protocol", MISMATCH, "e").cause()
    assert "ZAP status 400" in Refusal("auth", 400, "e").cause()
    assert "wrong server key" in Refusal("protocol", CRYPTOGRAPHIC, "e").peer_cause()
    assert "0x00000007" in Refusal("protocol", 7, "e").peer_cause()


@pytest.fixture
def transport() -> Iterator[Transport]:
    t = Transport()
    yield t
    t.close()  # hangs if a monitor socket were left open: the test would time out


def test_a_client_with_the_wrong_server_key_is_refused(transport: Transport) -> None:
    server = curve_keys()
    router = transport.socket("router", bind=ANY_PORT, curve_server=server)
    dealer = transport.socket(
        "dealer",
        connect=bound_endpoint(router),
        curve_client=curve_keys(),
        server_public=curve_keys().public,  # not the server's
    )
    client = HandshakeMonitor(dealer)
    on_server = HandshakeMonitor(router, HandshakeTally(needed=1))
    try:
        dealer.send(b"never delivered", zmq.NOBLOCK)
        refusal = wait_until(lambda: client.refused, 5.0)
        assert refusal.kind == "closed" and refusal.endpoint == bound_endpoint(router)
        assert client.tally.failures >= 2
        seen = wait_until(lambda: on_server.refused, 5.0)
        assert (seen.kind, seen.value) == ("protocol", CRYPTOGRAPHIC)
        assert not router.poll(0)
    finally:
        client.close()
        on_server.close()
    client.close()  # twice is harmless


def test_the_right_key_is_never_refused(transport: Transport) -> None:
    server = curve_keys()
    router = transport.socket("router", bind=ANY_PORT, curve_server=server)
    dealer = transport.socket(
        "dealer",
        connect=bound_endpoint(router),
        curve_client=curve_keys(),
        server_public=server.public,
    )
    client = HandshakeMonitor(dealer)
    try:
        dealer.send(b"hello")
        assert router.poll(5000)
        identity, _ = router.recv_multipart()
        router.send_multipart([identity, b"back"])
        assert dealer.poll(5000) and dealer.recv() == b"back"
        assert client.refused is None and client.tally.failures == 0
    finally:
        client.close()


def test_a_plain_peer_is_a_mechanism_mismatch(transport: Transport) -> None:
    plain = transport.socket("router", bind=ANY_PORT)
    dealer = transport.socket(
        "dealer", curve_client=curve_keys(), server_public=curve_keys().public
    )
    # libzmq tries once after a mechanism mismatch: the monitor must see that one.
    client = connect_monitored(dealer, bound_endpoint(plain))
    try:
        dealer.send(b"x", zmq.NOBLOCK)
        refusal = wait_until(lambda: client.refused, 5.0)
        assert (refusal.kind, refusal.value) == ("protocol", MISMATCH)
    finally:
        client.close()


def test_a_bad_endpoint_is_a_transport_error(transport: Transport) -> None:
    dealer = transport.socket("dealer")
    with pytest.raises(TransportError, match="cannot connect to not-an-endpoint"):
        connect_monitored(dealer, "not-an-endpoint")


def test_closing_the_watched_socket_first_is_harmless(transport: Transport) -> None:
    router = transport.socket("router", bind=ANY_PORT, curve_server=curve_keys())
    monitor = HandshakeMonitor(router)
    transport.close_socket(router)
    assert monitor.read() == []
    monitor.close()
