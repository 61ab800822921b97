"""Frame limits and the heartbeat socket's subscriptions, on real sockets over 127.0.0.1.

What a stranger can send must not cost memory: a frame above the socket's limit gets its
sender disconnected before it is delivered, and the server's heartbeat socket applies no
subscription but the empty one.
"""

from __future__ import annotations

from collections import Counter

import pytest
import zmq

from pushjobs.errors import TransportError
from pushjobs.transport.sockets import (
    DEFAULT_MAX_MESSAGE_BYTES,
    CurveKeys,
    Transport,
    bound_endpoint,
)
from server.shell.channels import Channels
from tests.support import curve_keys, wait_until

ANY_PORT = "tcp://127.0.0.1:*"


@pytest.fixture
def transport():
    t = Transport(max_message_bytes=1024)
    yield t
    t.close()


def _recv(sock: zmq.Socket, timeout_ms: int = 5000) -> list[bytes] | None:
    if not sock.poll(timeout_ms):
        return None
    return sock.recv_multipart()


def test_every_socket_carries_the_transport_limit_or_its_own(transport):
    assert transport.socket("pull", bind=ANY_PORT).getsockopt(zmq.MAXMSGSIZE) == 1024
    own = transport.socket("pull", bind=ANY_PORT, max_message_bytes=77)
    assert own.getsockopt(zmq.MAXMSGSIZE) == 77
    with Transport() as default:
        sock = default.socket("push", connect="tcp://127.0.0.1:9")
        assert sock.getsockopt(zmq.MAXMSGSIZE) == DEFAULT_MAX_MESSAGE_BYTES


def test_a_frame_above_the_limit_is_never_delivered(transport):
    pull = transport.socket("pull", bind=ANY_PORT)
    endpoint = bound_endpoint(pull)
    with Transport(max_message_bytes=10 * 1024 * 1024) as sender:
        big = sender.socket("push", connect=endpoint)
        big.send_multipart([b"x" * (4 * 1024 * 1024)])
        small = sender.socket("push", connect=endpoint)
        small.send_multipart([b"after"])
        assert _recv(pull) == [b"after"]
        assert _recv(pull, timeout_ms=200) is None  # the big frame was dropped, not queued


def test_a_limit_must_be_positive():
    with pytest.raises(TransportError):
        Transport(max_message_bytes=0)


def _channels(transport: Transport, drops: Counter[str], server: CurveKeys, node: str) -> Channels:
    return Channels(
        transport,
        server,
        api_bind=ANY_PORT,
        heartbeat_bind=ANY_PORT,
        reply_bind=ANY_PORT,
        node_allowed=lambda key: key == node,
        drops=drops,
    )


def test_the_heartbeat_socket_admits_node_keys_and_applies_only_the_empty_subscription():
    drops: Counter[str] = Counter()
    server, node, stranger = curve_keys(), curve_keys(), curve_keys()
    hostile = zmq.Context()
    spam = hostile.socket(zmq.XSUB)
    spam.setsockopt(zmq.LINGER, 0)
    try:
        with Transport() as server_side, Transport() as client:
            channels = _channels(server_side, drops, server, node.public)
            endpoint = channels.endpoints()["heartbeat"]
            keys = {"curve_client": node, "server_public": server.public}
            agent = client.socket("sub", connect=endpoint, **keys)  # subscribes to b""
            picky = client.socket("sub", connect=endpoint, subscribe=b"PJ1", **keys)
            outsider = client.socket(
                "sub", connect=endpoint, curve_client=stranger, server_public=server.public
            )
            spam.curve_secretkey = node.secret.encode()
            spam.curve_publickey = node.public.encode()
            spam.curve_serverkey = server.public.encode()
            spam.connect(endpoint)
            for n in range(50):
                spam.send(b"\x01" + n.to_bytes(4, "big") * 8)

            def delivered() -> bool:
                channels.subscriptions()
                channels.publish([b"beat"])
                return agent.poll(20) != 0

            wait_until(delivered, timeout_s=10)
            assert agent.recv_multipart() == [b"beat"]
            # The picky subscription was never applied; the stranger never got in.
            assert picky.poll(200) == 0
            assert outsider.poll(200) == 0

            def counted() -> bool:
                channels.subscriptions()
                return drops["subscription"] >= 51

            wait_until(counted, timeout_s=10)
    finally:
        spam.close()
        hostile.term()


def test_a_flooder_is_cut_off_and_a_failed_rebind_is_retried_not_fatal(monkeypatch):
    """Cutting off a key that floods rebinds the heartbeat socket; should another process
    hold the port in that instant, the server keeps serving and binds it again later."""
    from server.shell.subflood import FloodGuard

    drops: Counter[str] = Counter()
    server, node, insider = curve_keys(), curve_keys(), curve_keys()
    allowed = {node.public, insider.public}
    hostile = zmq.Context()
    spam = hostile.socket(zmq.XSUB)
    spam.setsockopt(zmq.LINGER, 0)
    try:
        with Transport() as server_side, Transport() as client:
            channels = Channels(
                server_side,
                server,
                api_bind=ANY_PORT,
                heartbeat_bind=ANY_PORT,
                reply_bind=ANY_PORT,
                node_allowed=lambda key: key in allowed,
                drops=drops,
            )
            channels.flood = FloodGuard(threshold=5)
            endpoint = channels.endpoints()["heartbeat"]
            spam.curve_secretkey = insider.secret.encode()
            spam.curve_publickey = insider.public.encode()
            spam.curve_serverkey = server.public.encode()
            spam.connect(endpoint)
            for n in range(20):
                spam.send(b"\x01" + n.to_bytes(4, "big"))
            sock = channels.heartbeat
            real_bind = sock.bind

            def taken(address: str) -> None:
                raise zmq.ZMQError(zmq.EADDRINUSE)

            monkeypatch.setattr(sock, "bind", taken)
            monkeypatch.setattr("server.shell.channels.REBIND_TIMEOUT_S", 0.05)
            wait_until(lambda: channels.subscriptions() or drops["subscription_cut_off"], 10)
            assert drops["heartbeat_unbound"] >= 1  # still serving: no exception
            monkeypatch.setattr(sock, "bind", real_bind)
            keys = {"curve_client": node, "server_public": server.public}
            agent = client.socket("sub", connect=endpoint, **keys)

            def delivered() -> bool:
                channels.subscriptions()  # binds again first
                channels.publish([b"beat"])
                return agent.poll(20) != 0

            wait_until(delivered, timeout_s=10)
            assert agent.recv_multipart() == [b"beat"]
            assert channels.flood.refused(insider.public, __import__("time").monotonic())
    finally:
        spam.close()
        hostile.term()
