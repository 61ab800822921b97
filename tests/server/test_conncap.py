"""Caps on strangers' open API connections: the pure bookkeeping, then real CurveZMQ
clients from 127.0.0.1 against the server's API socket."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import zmq

from keys.identity import generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.transport.handshake import parse
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint
from server.shell.channels import Channels
from server.shell.conncap import ADMIT, BUSY, ConnectionCaps, source_of
from server.shell.handshakes import Handshakes
from server.shell.serverconfig import ServerSection
from tests.support import curve_keys, wait_until

ANY_PORT = "tcp://127.0.0.1:*"
FRIEND = "friend-key"


def caps(per_source: int = 2, total: int = 100) -> ConnectionCaps:
    return ConnectionCaps(per_source=per_source, total=total, known=lambda k: k == FRIEND)


# --- pure ---------------------------------------------------------------------------------


def test_a_source_is_one_spelling_of_its_host():
    assert source_of("::ffff:10.0.0.7") == "10.0.0.7"
    assert source_of("[::1]") == "::1"
    assert source_of("10.0.0.7") == "10.0.0.7"
    assert source_of("") == ""


def test_strangers_are_refused_once_their_source_holds_the_cap():
    c = caps(per_source=2)
    c.opened(10, "10.0.0.1")
    c.opened(11, "10.0.0.1")
    c.opened(12, "10.0.0.1")  # the one asking: its accept was read first
    c.publish(c.admitted)
    assert c.admit("stranger", "10.0.0.1") == BUSY
    assert c.admit("stranger", "10.0.0.2") == ADMIT  # another source has room
    assert c.admit(FRIEND, "10.0.0.1") == ADMIT  # accepted keys are never refused
    c.publish(c.admitted)
    assert c.drops == Counter({"connections_per_source": 1})
    c.closed(10)
    c.publish(c.admitted)
    assert c.admit("stranger", "10.0.0.1") == ADMIT


def test_admissions_the_counts_do_not_cover_yet_count_on_top():
    c = caps(per_source=2)
    # A burst inside one turn: the loop has read none of these accepts yet.
    assert [c.admit("s", "10.0.0.1") for _ in range(4)] == [ADMIT, ADMIT, ADMIT, BUSY]
    covers = c.admitted
    for fd in (1, 2, 3):
        c.opened(fd, "10.0.0.1")
    c.publish(covers)  # now they are in the counts, and no longer on top
    c.opened(4, "10.0.0.1")
    c.publish(covers)
    assert c.admit("s", "10.0.0.1") == BUSY
    for fd in (1, 2, 3, 4):
        c.closed(fd)
    c.publish(c.admitted)
    assert c.admit("s", "10.0.0.1") == ADMIT


def test_the_total_caps_strangers_from_every_source():
    c = caps(per_source=10, total=3)
    for fd in range(4):
        c.opened(fd, f"10.0.0.{fd}")
    c.publish(c.admitted)
    assert c.admit("s", "10.9.9.9") == BUSY
    assert c.admit(FRIEND, "10.9.9.9") == ADMIT
    c.publish(c.admitted)
    assert c.drops == Counter({"connections_total": 1})


def test_a_reused_fd_closes_the_connection_it_replaced():
    c = caps()
    c.opened(5, "10.0.0.1")
    c.opened(5, "10.0.0.2")  # the close of the first was missed
    assert c.open == 1
    c.closed(5)
    c.closed(5)
    assert c.open == 0


def test_refusals_are_logged_once_per_source_per_window():
    c = caps(per_source=1)
    c.opened(1, "10.0.0.1")
    c.opened(2, "10.0.0.1")
    c.publish(c.admitted)
    c.admit("s", "10.0.0.1")
    lines = c.lines(now=100.0)
    assert len(lines) == 1 and "refused a connection from 10.0.0.1" in lines[0]
    for _ in range(4):
        c.admit("s", "10.0.0.1")
    assert c.lines(now=105.0) == []
    assert c.due() == 110.0
    (line,) = c.lines(now=110.0)
    assert "refused 4 connections from 10.0.0.1" in line and "5 since start" in line
    assert c.due() is None


# --- real sockets -------------------------------------------------------------------------


class Loop:
    """The server loop's part: the API socket's monitor, read as soon as it is readable."""

    def __init__(self, handshakes: Handshakes) -> None:
        self.handshakes = handshakes
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.handshakes.socket, zmq.POLLIN)
        while not self.stop.is_set():
            if poller.poll(20):
                self.handshakes.receive(0.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


class Client:
    """A CurveZMQ DEALER from 127.0.0.1, and what its handshakes came to."""

    def __init__(self, context: zmq.Context, endpoint: str, server: str, keys: CurveKeys):
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.curve_secretkey = keys.secret.encode()
        self.sock.curve_publickey = keys.public.encode()
        self.sock.curve_serverkey = server.encode()
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        self.sock.connect(endpoint)
        self.admitted = False

    def done(self) -> bool:
        while self.monitor.poll(0):
            event = parse(self.monitor.recv_multipart())
            self.admitted = self.admitted or event is not None
        return self.admitted

    def close(self) -> None:
        self.monitor.close(linger=0)
        self.sock.close(linger=0)


@pytest.fixture
def api(tmp_path):
    """The API socket of real ``Channels`` capped at 5 per source, its monitor read by a
    loop thread; and an accepted user key."""
    registry = KeyRegistry(tmp_path / "registry.json")
    user = generate("admin", "user")
    registry.add(user.public, state=KeyState.ACCEPTED)
    server = curve_keys()
    drops: Counter[str] = Counter()
    transport = Transport()
    channels = Channels(
        transport,
        server,
        api_bind=ANY_PORT,
        heartbeat_bind=ANY_PORT,
        reply_bind=ANY_PORT,
        node_allowed=lambda key: False,
        drops=drops,
    )
    section = ServerSection(max_api_connections_per_source=5, max_api_connections=1000)
    handshakes = Handshakes(channels.api, "api", channels.cap_api(section, registry))
    loop = Loop(handshakes)
    context = zmq.Context()
    clients: list[Client] = []

    def connect(keys: CurveKeys | None = None) -> Client:
        """A client; returned once the server admitted or refused it. A ZAP status 300
        hangs up on the client without a word (the CurveZMQ RFC; libzmq does so when the
        handshake times out): the server's count of refusals tells."""
        caps = handshakes.caps
        assert caps is not None
        before = caps.refused_source
        client = Client(context, bound_endpoint(channels.api), server.public, keys or curve_keys())
        clients.append(client)
        wait_until(lambda: client.done() or caps.refused_source > before, 20.0)
        return client

    connect.user = CurveKeys(user.public.curve_public, user.curve_secret)  # type: ignore[attr-defined]
    connect.drops = drops  # type: ignore[attr-defined]
    connect.caps = handshakes.caps  # type: ignore[attr-defined]
    try:
        yield connect
    finally:
        for client in clients:
            client.close()
        context.term()
        loop.close()
        handshakes.close()
        transport.close()


def test_strangers_beyond_the_cap_are_refused_and_counted_and_room_frees_up(api):
    first = [api() for _ in range(15)]
    admitted = [c for c in first if c.admitted]
    # Five, or six when the ZAP thread decided before the loop read that accept.
    assert 5 <= len(admitted) <= 6
    wait_until(lambda: api.drops["connections_per_source"] == 15 - len(admitted), 10.0)
    assert not any(c.done() for c in first if c not in admitted)
    # An accepted key is admitted from the full source, and counts.
    assert api(api.user).admitted
    for client in first:
        if not client.admitted:
            client.close()
    for client in admitted[:3]:
        client.close()
    wait_until(lambda: api.caps.open == len(admitted) - 2, 10.0)  # and the user's
    room = 5 - api.caps.open
    assert room >= 1 and all(api().admitted for _ in range(room))
