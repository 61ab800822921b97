"""Watching the server: verified heartbeats only, online at once on a config, offline on silence."""

from __future__ import annotations

import logging

from agent.serverwatch import ServerWatch
from agent.trust import trust_server
from keys.fingerprint import key_id
from keys.identity import generate
from pushjobs.clock import FakeClock
from pushjobs.protocol import messages as m
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from tests.agent.test_rediscovery import config

SERVER = generate("server", "server")
log = logging.getLogger("test")


def beats(signer_of=SERVER, count: int = 1, clock: FakeClock | None = None) -> list[list[bytes]]:
    signer = Ed25519Signer(key_id(signer_of.public.ed25519_public), signer_of.signing_key())
    outbox = Outbox("server", "srv-1", signer)
    now_ms = (clock or FakeClock()).wall_ms()
    return [outbox.frames(m.ServerHeartbeat, now_ms, leader=True) for _ in range(count)]


def test_nothing_is_watched_before_the_first_config() -> None:
    clock = FakeClock()
    watch = ServerWatch(trust_server(SERVER.public), log)
    assert watch.beats(beats(clock=clock), clock.monotonic(), clock.wall_ms()) == []
    assert not watch.online and watch.next_deadline() is None


def test_a_config_makes_the_server_online_until_its_heartbeats_stop() -> None:
    clock = FakeClock()
    watch = ServerWatch(trust_server(SERVER.public), log)
    watch.trust(config(), clock.monotonic())  # interval 1 s, offline after 3
    assert watch.online
    clock.advance(2.0)
    assert len(watch.beats(beats(clock=clock), clock.monotonic(), clock.wall_ms())) == 1
    clock.advance(2.9)
    watch.expire(clock.monotonic())
    assert watch.online
    clock.advance(0.1)
    watch.expire(clock.monotonic())
    assert not watch.online


def test_heartbeats_signed_by_another_key_are_dropped() -> None:
    clock = FakeClock()
    watch = ServerWatch(trust_server(SERVER.public), log)
    watch.trust(config(), clock.monotonic())
    impostor = generate("server", "server")
    assert watch.beats(beats(impostor, clock=clock), clock.monotonic(), clock.wall_ms()) == []
    assert watch.inbox.drops["unknown_key"] == 1
