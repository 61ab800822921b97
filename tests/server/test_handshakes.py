"""The server's log of refused CurveZMQ handshakes: its rate limit (pure, fake time), then
a real API-like ROUTER refusing a client that holds the wrong server key."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import zmq

from pushjobs.transport.handshake import CRYPTOGRAPHIC, Refusal
from pushjobs.transport.sockets import Transport, bound_endpoint
from server.shell.handshakes import Handshakes, RefusalLog
from tests.support import curve_keys, wait_until

WRONG_KEY = Refusal("protocol", CRYPTOGRAPHIC, "tcp://127.0.0.1:7700")


def test_the_first_refusal_is_logged_at_once() -> None:
    log = RefusalLog("api")
    line = log.refused(WRONG_KEY, 100.0)
    assert line is not None
    assert "api socket tcp://127.0.0.1:7700: refused a CurveZMQ handshake" in line
    assert "wrong server key" in line and "server_key" in line


def test_refusals_within_the_window_are_counted_then_logged_as_one_line() -> None:
    log = RefusalLog("api", every_s=10.0)
    log.refused(WRONG_KEY, 100.0)
    lines = [log.refused(WRONG_KEY, 100.0 + i * 0.1) for i in range(1, 50)]
    assert lines == [None] * 49
    assert log.due() == 110.0
    assert log.flush(109.9) is None
    line = log.flush(110.0)
    assert line is not None and "refused 49 CurveZMQ handshakes (50 since start)" in line
    assert log.due() is None and log.flush(200.0) is None


def test_a_refusal_after_a_quiet_window_is_logged_at_once_again() -> None:
    log = RefusalLog("api", every_s=10.0)
    log.refused(WRONG_KEY, 100.0)
    assert log.refused(WRONG_KEY, 115.0) is not None
    assert log.refused(WRONG_KEY, 116.0) is None


@pytest.fixture
def transport() -> Iterator[Transport]:
    t = Transport()
    yield t
    t.close()


def test_a_wrong_server_key_is_logged_on_the_server(
    transport: Transport, caplog: pytest.LogCaptureFixture
) -> None:
    router = transport.socket("router", bind="tcp://127.0.0.1:*", curve_server=curve_keys())
    handshakes = Handshakes(router, "api", every_s=60.0)
    dealer = transport.socket(
        "dealer",
        connect=bound_endpoint(router),
        curve_client=curve_keys(),
        server_public=curve_keys().public,
    )
    dealer.send(b"x", zmq.NOBLOCK)
    poller = zmq.Poller()
    poller.register(handshakes.socket, zmq.POLLIN)

    def refused_twice() -> bool:
        if dict(poller.poll(100)):
            handshakes.receive(now=1.0)
        return handshakes.log.total >= 2

    try:
        with caplog.at_level(logging.WARNING, logger="pushjobs.server"):
            wait_until(refused_twice, 10.0)
        lines = [r.getMessage() for r in caplog.records if "CurveZMQ" in r.getMessage()]
        assert len(lines) == 1 and "wrong server key" in lines[0]
        assert bound_endpoint(router) in lines[0]
        assert handshakes.next_deadline() == 61.0
        with caplog.at_level(logging.WARNING, logger="pushjobs.server"):
            handshakes.tick(61.0)
        assert "since start" in caplog.records[-1].getMessage()
    finally:
        handshakes.close()
