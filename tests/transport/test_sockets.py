"""The socket factory on real ZeroMQ sockets over 127.0.0.1."""

from __future__ import annotations

import pytest
import zmq

from pushjobs.errors import TransportError
from pushjobs.transport.sockets import Transport, bound_endpoint, drain
from tests.support import curve_keys

ANY_PORT = "tcp://127.0.0.1:*"


@pytest.fixture
def transport():
    t = Transport()
    yield t
    t.close()


def recv(sock, timeout_ms=5000):
    if not sock.poll(timeout_ms):
        return None
    return sock.recv_multipart()


def test_sockets_have_linger_zero_and_explicit_hwm(transport):
    sock = transport.socket("push", connect="tcp://127.0.0.1:9", hwm=7)
    assert sock.getsockopt(zmq.LINGER) == 0
    assert sock.getsockopt(zmq.SNDHWM) == 7
    assert sock.getsockopt(zmq.RCVHWM) == 7


def test_push_pull_with_curve_any_client(transport):
    server = curve_keys()
    pull = transport.socket("pull", bind=ANY_PORT, curve_server=server)
    push = transport.socket(
        "push", connect=bound_endpoint(pull), curve_client=curve_keys(), server_public=server.public
    )
    push.send_multipart([b"a", b"b", b"c"])
    assert recv(pull) == [b"a", b"b", b"c"]


def test_allow_list_admits_only_the_listed_client(transport):
    server, friend, stranger = curve_keys(), curve_keys(), curve_keys()
    pull = transport.socket(
        "pull",
        bind=ANY_PORT,
        curve_server=server,
        allowed_clients=lambda key: key == friend.public,
    )
    endpoint = bound_endpoint(pull)
    bad = transport.socket(
        "push", connect=endpoint, curve_client=stranger, server_public=server.public
    )
    bad.send_multipart([b"from stranger"])
    good = transport.socket(
        "push", connect=endpoint, curve_client=friend, server_public=server.public
    )
    good.send_multipart([b"from friend"])
    assert recv(pull) == [b"from friend"]
    assert recv(pull, timeout_ms=300) is None  # the stranger's handshake was refused


def test_allow_list_check_that_raises_refuses(transport):
    server, client = curve_keys(), curve_keys()

    def broken(key):
        raise RuntimeError("registry unavailable")

    pull = transport.socket("pull", bind=ANY_PORT, curve_server=server, allowed_clients=broken)
    push = transport.socket(
        "push", connect=bound_endpoint(pull), curve_client=client, server_public=server.public
    )
    push.send_multipart([b"x"])
    assert recv(pull, timeout_ms=300) is None


def test_wrong_server_key_never_connects(transport):
    server, impostor = curve_keys(), curve_keys()
    pull = transport.socket("pull", bind=ANY_PORT, curve_server=server)
    push = transport.socket(
        "push",
        connect=bound_endpoint(pull),
        curve_client=curve_keys(),
        server_public=impostor.public,
    )
    push.send_multipart([b"x"])
    assert recv(pull, timeout_ms=300) is None


def test_pub_sub(transport):
    pub = transport.socket("pub", bind=ANY_PORT)
    sub = transport.socket("sub", connect=bound_endpoint(pub))
    # PUB/SUB readiness: publish until the subscriber has joined, bounded
    for _ in range(500):
        pub.send_multipart([b"hello"])
        got = recv(sub, timeout_ms=10)
        if got is not None:
            break
    assert got == [b"hello"]


def test_router_dealer(transport):
    router = transport.socket("router", bind=ANY_PORT)
    dealer = transport.socket("dealer", connect=bound_endpoint(router), identity=b"cli-1")
    dealer.send_multipart([b"req"])
    assert recv(router) == [b"cli-1", b"req"]
    router.send_multipart([b"cli-1", b"rep"])
    assert recv(dealer) == [b"rep"]


def test_drain_takes_a_batch_without_blocking(transport):
    pull = transport.socket("pull", bind=ANY_PORT)
    push = transport.socket("push", connect=bound_endpoint(pull))
    for i in range(10):
        push.send_multipart([str(i).encode()])
    assert pull.poll(5000)
    got: list[list[bytes]] = []
    while len(got) < 10:
        assert pull.poll(5000)
        got.extend(drain(pull, 4))
    assert [int(m[0]) for m in got] == list(range(10))
    assert drain(pull, 4) == []


def test_drain_keeps_every_part_of_each_message(transport):
    pull = transport.socket("pull", bind=ANY_PORT, max_message_bytes=1 << 20)
    push = transport.socket("push", connect=bound_endpoint(pull))
    sent = [
        [b"one"],
        [b"a", b"", b"c"],
        [b"x" * 100_000, b"y"],  # past zmq's small-message size: a zero-copy frame
        [b"1", b"2", b"3", b"4", b"5"],
        [b"p", b"q", b"r", b"s"],  # one past the three frames drain reads unrolled
        [b"h", b"b", b"s"],
        [b"", b""],
    ]
    for message in sent:
        push.send_multipart(message)
    got: list[list[bytes]] = []
    while len(got) < len(sent):
        assert pull.poll(5000)
        got.extend(drain(pull, 100))
    assert got == sent
    assert all(type(part) is bytes for message in got for part in message)


def test_bind_conflict_is_translated(transport):
    first = transport.socket("pull", bind=ANY_PORT)
    with pytest.raises(
        TransportError, match=r"cannot set up the pull socket on tcp://127\.0\.0\.1"
    ):
        transport.socket("pull", bind=bound_endpoint(first))


def test_bad_endpoint_is_translated(transport):
    with pytest.raises(TransportError):
        transport.socket("push", connect="nonsense://x")


def test_close_terminates_with_pending_messages():
    t = Transport()
    push = t.socket("push", connect="tcp://127.0.0.1:9", hwm=10)
    for _ in range(5):
        push.send_multipart([b"never delivered"], zmq.NOBLOCK)
    t.close()  # linger 0: must not hang
    assert t.context.closed
