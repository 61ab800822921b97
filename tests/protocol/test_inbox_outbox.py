from __future__ import annotations

import os

import pytest

from pushjobs.errors import UnknownKey
from pushjobs.protocol import messages as m
from pushjobs.protocol import signing
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.outbox import Outbox

NOW = 1_700_000_000_000
KEY = os.urandom(32)


def resolve(method, key_id):
    if key_id != "n1.k":
        raise UnknownKey(key_id)
    return signing.HmacVerifier(KEY, owner="n1")


@pytest.fixture
def outbox():
    return Outbox("n1", "inc-1", signing.HmacSigner("n1.k", KEY))


@pytest.fixture
def inbox():
    return Inbox(resolve, max_skew_s=30)


def heartbeat(outbox, now=NOW):
    return outbox.frames(m.NodeHeartbeat, now, command_endpoint="tcp://127.0.0.1:1")


def test_outbox_numbers_messages_strictly(outbox):
    first = outbox.message(m.Ping, NOW, node="x")
    second = outbox.message(m.AckCommit, NOW, job_id="j")
    assert (first.sequence, second.sequence) == (1, 2)
    assert (first.sender, first.incarnation, first.timestamp) == ("n1", "inc-1", NOW)


def test_inbox_accepts_and_reports_restart(outbox, inbox):
    got = inbox.accept(heartbeat(outbox), NOW)
    assert got is not None and not got.restarted
    assert got.message.sequence == 1
    restarted = Outbox("n1", "inc-2", outbox.signer)
    got = inbox.accept(heartbeat(restarted), NOW)
    assert got is not None and got.restarted


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda f: f[:2], "frame"),
        (lambda f: [f[0], b"x" * 70_000, f[2]], "oversized"),
        (lambda f: [b"PJ1 hmac-sha256 other", f[1], f[2]], "unknown_key"),
        (lambda f: [f[0], f[1], bytes(32)], "signature"),
    ],
)
def test_inbox_counts_each_drop_reason(outbox, inbox, mangle, reason):
    assert inbox.accept(mangle(heartbeat(outbox)), NOW) is None
    assert inbox.drops == {reason: 1}
    assert inbox.last_error
    assert inbox.accept(heartbeat(outbox), NOW) is not None  # keeps serving


def test_inbox_drops_replays_and_skew(outbox, inbox):
    frames = heartbeat(outbox)
    assert inbox.accept(frames, NOW) is not None
    assert inbox.accept(frames, NOW) is None
    assert inbox.accept(heartbeat(outbox, now=NOW - 60_000), NOW) is None
    assert inbox.drops == {"replay": 1, "clock_skew": 1}
    assert inbox.dropped == 2


def test_inbox_drops_malformed_but_validly_signed_body(inbox):
    header = b"PJ1 hmac-sha256 n1.k"
    body = b'{"type": "node_heartbeat"}'
    sig = signing.HmacSigner("n1.k", KEY).sign(header + b"\n" + body)
    assert inbox.accept([header, body, sig], NOW) is None
    assert inbox.drops == {"malformed": 1}


def test_reseal_switches_the_key(outbox, inbox):
    outbox.reseal(signing.HmacSigner("n1.k", os.urandom(32)))
    assert inbox.accept(heartbeat(outbox), NOW) is None
    assert inbox.drops == {"signature": 1}
