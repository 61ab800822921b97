"""The client's way to the leader among several servers, and what it never sends twice
(``pushjobs.api.client``): the policy alone, over a fake exchange and a fake clock; then a
server that hangs up mid-call, over real sockets on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from keys.fingerprint import key_id
from keys.identity import generate
from pushjobs.api import client as client_module
from pushjobs.api import methods
from pushjobs.api.client import WAITING, ApiClient, Failover, resend_safe
from pushjobs.api.disconnects import CONNECTED, DISCONNECTED, RETRIED, PeerLink
from pushjobs.cli import userconfig
from pushjobs.errors import ApiError, ConfigError, Unreachable
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.messages import ApiReply, ApiRequest, ErrorBody
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, ed25519_verifier
from pushjobs.testbed.sandbox import free_port
from pushjobs.transport.handshake import Event
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint

A, B, C = "tcp://a:7700", "tcp://b:7700", "tcp://c:7700"

# What a fake server does with a request: answer (ok or error), or stay silent (None).
Behaviour = Callable[[str], ApiReply | None]


def ok(result: Any = "done") -> Behaviour:
    return lambda method: reply(ok=True, result=result)


def not_leader(leader: str | None = None) -> Behaviour:
    def answer(method: str) -> ApiReply:
        if not method.startswith(("job.", "node.")):
            return reply(ok=True, result={"servers": []})
        return reply(ok=False, error=ErrorBody(methods.NOT_LEADER, "not the leader", leader))

    return answer


def dead(method: str) -> None:
    return None


def reply(**fields: Any) -> ApiReply:
    return ApiReply(
        sender="server", incarnation="i", sequence=1, timestamp=0, request_id="r", **fields
    )


class Clock:
    """Stands in for the ``time`` module inside the client: silence and pauses advance it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def time_ns(self) -> int:
        return int(self.now * 1e9)


class FakeClient(ApiClient):
    def __init__(
        self, endpoints: list[str], servers: dict[str, Behaviour], clock: Clock, **kw: Any
    ):
        super().__init__(
            endpoints, generate("server", "server").public, generate("alice", "user"), **kw
        )
        self.servers = servers
        self.clock = clock
        self.sent: list[tuple[str, str]] = []

    def _exchange(self, method: str, params: dict[str, Any], timeout_s: float) -> ApiReply:
        self.sent.append((self.endpoint, method))
        answer = self.servers.get(self.endpoint, dead)(method)
        if answer is None or timeout_s <= 0:  # no time to hear an answer in, as for real
            self.clock.now += timeout_s
            raise Unreachable(f"no answer from {self.endpoint} within {timeout_s:g} s")
        return answer


MADE: list[ApiClient] = []


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(client_module, "time", fake)
    yield fake
    while MADE:
        MADE.pop().close()  # its transport: every socket and context closed


def make(
    clock: Clock, endpoints: list[str], servers: dict[str, Behaviour], timeout_s: float = 10.0
) -> tuple[FakeClient, list[str]]:
    told: list[str] = []
    c = FakeClient(endpoints, servers, clock, timeout_s=timeout_s, on_wait=told.append)
    MADE.append(c)
    return c, told


# --- the pure parts ---------------------------------------------------------------------------


def test_the_next_server_is_the_named_leader_else_the_next_in_turn() -> None:
    f = Failover([A, B, C])
    assert f.current == A
    assert f.refused(C) == C
    assert f.refused(None) == A  # wraps round
    assert f.silent() == B
    assert f.refused("tcp://unlisted:1") == "tcp://unlisted:1"
    assert f.silent() == A  # from an unlisted one, the turn starts over


def test_no_endpoint_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError):
        Failover([])


@pytest.mark.parametrize(
    ("method", "safe"),
    [
        ("job.status", True),
        ("job.watch", True),
        ("job.list", True),
        ("server.info", True),
        ("node.list", True),
        ("job.abort", True),
        ("key.list", True),
        ("key.show", True),
        ("job.start", False),
        ("key.add", False),
        ("key.delete", False),
        ("no.such", False),
    ],
)
def test_only_what_cannot_happen_twice_is_sent_again_after_silence(method: str, safe: bool) -> None:
    assert resend_safe(method) is safe


# --- the policy over a fake exchange ---------------------------------------------------------


def test_a_standby_naming_the_leader_is_a_detour_not_a_wait(clock: Clock) -> None:
    c, told = make(clock, [A, B], {A: not_leader(B), B: ok()})
    assert c.call("job.status", {"job_id": "x"}) == "done"
    assert c.sent == [(A, "job.status"), (B, "job.status")]
    assert told == [] and c.endpoint == B


def test_a_read_after_silence_goes_to_the_next_server(clock: Clock) -> None:
    c, told = make(clock, [A, B], {B: ok()})
    assert c.call("job.list") == "done"
    assert c.sent == [(A, "job.list"), (B, "job.list")]
    assert told == [WAITING]
    assert clock.now == pytest.approx(1000.0 + 10.0 / 4)  # A had its share of the timeout


def test_job_start_is_sent_only_to_a_server_that_answers(clock: Clock) -> None:
    c, _ = make(clock, [A, B], {B: ok({"job": {}})})
    c.call("job.start", {"command": "true", "nodes": ["n"]})
    assert c.sent == [(A, "server.list"), (B, "server.list"), (B, "job.start")]


def test_job_start_met_by_silence_is_not_sent_again(clock: Clock) -> None:
    servers: dict[str, Behaviour] = {A: lambda m: reply(ok=True) if m == "server.list" else None}
    servers[B] = ok()
    c, _ = make(clock, [A, B], servers)
    with pytest.raises(Unreachable, match="may have reached it"):
        c.call("job.start", {"command": "true", "nodes": ["n"]})
    assert [s for s in c.sent if s[1] == "job.start"] == [(A, "job.start")]


def test_job_start_refused_is_sent_to_the_leader(clock: Clock) -> None:
    c, _ = make(clock, [A, B], {A: not_leader(B), B: ok()})
    c.call("job.start", {"command": "true", "nodes": ["n"]})
    assert c.sent == [(A, "server.list"), (A, "job.start"), (B, "server.list"), (B, "job.start")]


def test_during_a_takeover_it_waits_for_a_leader_and_says_so_once(clock: Clock) -> None:
    answers = iter([*[not_leader()] * 6, ok()])
    current = {"a": next(answers)}

    def a(method: str) -> ApiReply | None:
        if method.startswith("job."):
            current["a"] = next(answers)
        return current["a"](method)

    c, told = make(clock, [A], {A: a})
    assert c.call("job.status", {"job_id": "x"}) == "done"
    assert told == [WAITING]
    assert clock.now - 1000.0 < 10.0


def test_no_leader_within_the_timeout_is_not_leader_exit_6(clock: Clock) -> None:
    c, told = make(clock, [A, B], {A: not_leader(), B: not_leader()}, timeout_s=3.0)
    with pytest.raises(ApiError) as raised:
        c.call("job.list")
    assert raised.value.code == methods.NOT_LEADER
    assert "no server leads" in str(raised.value) and told == [WAITING]
    assert clock.now == pytest.approx(1003.0, abs=0.3)


def test_every_server_silent_is_unreachable_naming_them_all(clock: Clock) -> None:
    c, _ = make(clock, [A, B], {}, timeout_s=4.0)
    with pytest.raises(Unreachable, match=f"no answer from {A} or {B} within 4 s"):
        c.call("job.list")
    assert clock.now == pytest.approx(1004.0)


def test_one_silent_server_is_unreachable_after_the_whole_timeout(clock: Clock) -> None:
    c, told = make(clock, [A], {})
    with pytest.raises(Unreachable):
        c.call("job.start", {"command": "true", "nodes": ["n"]})
    assert c.sent == [(A, "job.start")]  # one server: nothing to probe, no one else to ask
    assert told == [] and clock.now == pytest.approx(1010.0)


def test_other_refusals_are_not_retried(clock: Clock) -> None:
    refused = reply(ok=False, error=ErrorBody(methods.NOT_FOUND, "no job 'x'"))
    c, _ = make(clock, [A, B], {A: lambda m: refused})
    with pytest.raises(ApiError, match="no job"):
        c.call("job.status", {"job_id": "x"})
    assert c.sent == [(A, "job.status")]


# --- the config ---------------------------------------------------------------------------


def write(path: Path, server: str) -> Path:
    path.write_text(
        f'[client]\nserver = {server}\nserver_key = "/k/server.pub"\nuser_key = "/k/a.key"\n'
    )
    return path


def test_the_config_takes_one_server_or_several(tmp_path: Path) -> None:
    one = userconfig.load(write(tmp_path / "one.toml", f'"{A}"'))
    assert one.endpoints() == [A]
    several = userconfig.load(write(tmp_path / "two.toml", f'["{A}", "{B}"]'))
    assert several.endpoints() == [A, B]
    override = userconfig.load(write(tmp_path / "o.toml", f'"{A}"'), server=f"{B},{C}")
    assert override.endpoints() == [B, C]


def test_an_empty_server_list_is_a_missing_server(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"client\.server"):
        userconfig.load(write(tmp_path / "none.toml", "[]"))


def test_one_server_standing_by_is_waited_for_then_not_leader(clock: Clock) -> None:
    c, told = make(clock, [A], {A: not_leader()}, timeout_s=1.0)
    with pytest.raises(ApiError) as raised:
        c.call("job.start", {"command": "true", "nodes": ["n"]})
    assert raised.value.code == methods.NOT_LEADER, raised.value
    assert "no server leads" in str(raised.value) and told == [WAITING]
    assert all(method == "job.start" for _, method in c.sent)  # refused each time: safe


def test_with_several_servers_a_watch_is_polled_in_shorter_waits(clock: Clock) -> None:
    seen: list[dict[str, Any]] = []

    class Recording(FakeClient):
        def _exchange(self, method: str, params: dict[str, Any], timeout_s: float) -> ApiReply:
            seen.append({**params, "timeout_s": timeout_s})
            return super()._exchange(method, params, timeout_s)

    c = Recording([A, B], {B: ok()}, clock, timeout_s=10.0)
    MADE.append(c)
    c.call("job.watch", {"job_id": "x", "version": 1, "wait_s": 10.0})
    assert [s["wait_s"] for s in seen] == [2.5, 2.5]
    assert seen[0]["timeout_s"] == 5.0  # a dead A costs its share plus the shorter wait


# --- a server that hangs up mid-call: real sockets on 127.0.0.1 ------------------------------


def lost(link: PeerLink) -> bool:
    return link.lost  # read anew each time (mypy would keep a narrowed attribute)


def test_only_a_disconnect_after_a_handshake_that_succeeded_is_a_hang_up() -> None:
    link = PeerLink()
    refused = Event(int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL), 32, "e")
    link.see(refused)
    link.see(Event(DISCONNECTED, 0, "e"))  # a refused handshake ends in a disconnect too
    assert not lost(link)
    link.see(Event(int(zmq.EVENT_HANDSHAKE_SUCCEEDED), 0, "e"))
    link.see(Event(DISCONNECTED, 0, "e"))
    assert lost(link)
    link.arm()  # a new request: a hang-up before it is not its concern
    assert not lost(link)
    link.see(Event(DISCONNECTED, 0, "e"))  # still down: nothing new
    assert not lost(link)


SERVER, USER = generate("server", "server"), generate("alice", "user")
WATCH = {"job_id": "j1", "version": 1, "wait_s": 10.0}


class FakeServer:
    """A real CurveZMQ ROUTER on 127.0.0.1 holding the server's keys, served by a thread:
    it answers ``job.watch`` with ``result``, or (``result`` None) parks it and dies."""

    def __init__(self, result: Any) -> None:
        server, user = SERVER, USER
        self.transport = Transport()
        keys = CurveKeys(server.public.curve_public, server.curve_secret)
        self.sock = self.transport.socket("router", bind="tcp://127.0.0.1:*", curve_server=keys)
        self.endpoint = bound_endpoint(self.sock)
        signer = Ed25519Signer(key_id(server.public.ed25519_public), server.signing_key())
        self.outbox = Outbox(server.name, "server-incarnation", signer)
        verifier = ed25519_verifier(user.public.ed25519_public, owner=user.name)
        self.inbox = Inbox(lambda method, kid: verifier, 300.0)
        self.result = result
        self.asked: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.sock.poll(50):
                    continue
                identity, *frames = self.sock.recv_multipart()
                received = self.inbox.accept(frames, time.time_ns() // 1_000_000)
                if received is None or not isinstance(received.message, ApiRequest):
                    continue
                request = received.message
                self.asked.append(request.method)
                if self.result is None and request.method == "job.watch":
                    return  # parked, and the process dies: its connections close
                now_ms, rid = time.time_ns() // 1_000_000, request.request_id
                reply = self.outbox.frames(
                    ApiReply, now_ms, request_id=rid, ok=True, result=self.result
                )
                self.sock.send_multipart([identity, *reply])
        finally:
            self.transport.close_socket(self.sock)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.transport.close()


def test_a_parked_watch_on_a_server_that_dies_is_given_up_at_once() -> None:
    dying = FakeServer(result=None)
    try:
        client = ApiClient(dying.endpoint, SERVER.public, USER, timeout_s=5.0)
        # Silence would end it too, after its 15 s: "no answer from ... within".
        with client, pytest.raises(Unreachable, match="closed the connection mid-call"):
            client.call("job.watch", WATCH)
    finally:
        dying.close()
    assert dying.asked == ["job.watch"]


def test_a_parked_watch_moves_to_the_next_server_when_its_server_dies() -> None:
    dying = FakeServer(result=None)
    leader = FakeServer(result={"job": {"job_id": "j1", "version": 2}})
    told: list[str] = []
    try:
        endpoints = [dying.endpoint, leader.endpoint]
        with ApiClient(endpoints, SERVER.public, USER, timeout_s=40.0, on_wait=told.append) as c:
            started = time.monotonic()
            assert c.call("job.watch", WATCH) == {"job": {"job_id": "j1", "version": 2}}
            took_s = time.monotonic() - started
            assert c.endpoint == leader.endpoint
    finally:
        dying.close()
        leader.close()
    assert dying.asked == ["job.watch"] and leader.asked == ["job.watch"]
    assert told == [WAITING]
    # The dead server's silence would have held the watch for its whole attempt (10 s
    # plus the 10 s wait); its hang-up is noticed at once. Bounded far from both.
    assert took_s < 10.0, took_s


def refused(link: PeerLink) -> bool:
    return link.refused  # read anew each time, as ``lost``


def test_a_connect_that_fails_before_any_connection_means_nothing_listens() -> None:
    link = PeerLink()
    link.see(Event(RETRIED, 100, "e"))  # the port refused: libzmq will retry
    assert refused(link)
    link = PeerLink()
    link.see(Event(CONNECTED, 7, "e"))
    link.see(Event(DISCONNECTED, 0, "e"))
    link.see(Event(RETRIED, 100, "e"))  # reconnecting to a server that was there
    assert not refused(link)


def test_a_server_in_the_list_that_is_down_costs_no_wait() -> None:
    # A job.start, sent only to a server that answers (the probe first): the dead first
    # endpoint refuses the connection, so the next is asked at once, without "waiting for a
    # leader" (before, the dead one had its share of the timeout, then the user was told).
    leader = FakeServer(result={"job_id": "j1"})
    told: list[str] = []
    try:
        endpoints = [f"tcp://127.0.0.1:{free_port()}", leader.endpoint]
        with ApiClient(endpoints, SERVER.public, USER, timeout_s=40.0, on_wait=told.append) as c:
            assert c.call("job.start", {"command": "true", "nodes": ["n1"]}) == {"job_id": "j1"}
            assert c.endpoint == leader.endpoint
    finally:
        leader.close()
    assert leader.asked == [client_module.PROBE, "job.start"]
    assert told == []


def test_every_server_down_is_unreachable_after_the_timeout_told_once() -> None:
    endpoints = [f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"]
    told: list[str] = []
    client = ApiClient(endpoints, SERVER.public, USER, timeout_s=1.0, on_wait=told.append)
    with client, pytest.raises(Unreachable, match=" or ".join(endpoints)):
        client.call("node.list", {})
    assert told == [WAITING]


def test_one_endpoint_client_leaves_a_named_leader_that_went_silent(clock: Clock) -> None:
    """Given only A, the client follows A's "the leader is B" to B; B then dies. Later
    calls are not stuck on B for the whole timeout: after one attempt they go back to A,
    which leads by now (issue: "a client stuck on a dead leader")."""
    state = {"a_leads": False}

    def a(method: str) -> ApiReply | None:
        return ok()(method) if state["a_leads"] else not_leader(B)(method)

    c, _ = make(clock, [A], {A: a, B: ok()})
    assert c.call("job.status", {"job_id": "x"}) == "done"
    assert c.endpoint == B
    del c.servers[B]  # B dies; A takes over
    state["a_leads"] = True
    start = clock.now
    assert c.call("job.status", {"job_id": "x"}) == "done"
    assert c.sent[-2:] == [(B, "job.status"), (A, "job.status")]
    assert clock.now - start <= 10.0 / 4 + 0.01  # one attempt's share, not the whole timeout
    assert c.endpoint == A
    # A job start is not sent to a silent leader it followed: probed first, then A.
    del c.servers[A]
    c.servers[B] = ok()
    state["a_leads"] = False
    c.servers[A] = a
    c.call("job.status", {"job_id": "x"})  # A names B again
    del c.servers[B]
    state["a_leads"] = True
    c.call("job.start", {"command": "true", "nodes": ["n"]})
    assert [s for s in c.sent if s[1] == "job.start"] == [(A, "job.start")]


def test_a_named_leader_silent_within_the_same_call_sends_it_back_to_the_configured(
    clock: Clock,
) -> None:
    answers = iter([not_leader(B), ok()])
    current = {"a": next(answers)}

    def a(method: str) -> ApiReply | None:
        answer = current["a"](method)
        if method.startswith("job."):
            current["a"] = next(answers, ok())
        return answer

    c, _ = make(clock, [A], {A: a})  # B named, but dead
    assert c.call("job.status", {"job_id": "x"}) == "done"
    assert c.sent == [(A, "job.status"), (B, "job.status"), (A, "job.status")]
    assert clock.now - 1000.0 <= 10.0 / 4 + 0.3
