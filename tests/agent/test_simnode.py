"""A simulated node: the same bytes as the codec, the agent's rules, drawn outcomes."""

from __future__ import annotations

import random

import pytest

from agent.simulator.simnode import Behaviour, ExpireAt, FinishAt, Later, SimNode
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import open_frames, seal
from pushjobs.protocol.signing import HmacSigner, HmacVerifier
from pushjobs.testbed.simkeys import SimKeys, node_name

KEY = bytes(range(32))
T = 1_700_000_000_000


def node() -> SimNode:
    n = SimNode(0, "sim-00000")
    n.configure("s1", KEY, 100.0)
    return n


def cmd(cls, seq=1, **fields):
    return cls(
        sender="server", incarnation="si", sequence=seq, timestamp=T, node="sim-00000", **fields
    )


def commit(job="j1", seq=1, capture=False):
    return cmd(m.Commit, seq, job_id=job, command="true", options=m.RunOptions(capture=capture))


def kinds(effects):
    return [(type(e).__name__, getattr(getattr(e, "cls", None), "TYPE", None)) for e in effects]


def test_heartbeat_frames_are_exactly_what_seal_would_write():
    n = node()
    n.configure("s1", KEY, 100.0)
    frames = n.heartbeat_frames("tcp://127.0.0.1:5", T)
    expected = seal(
        m.NodeHeartbeat(
            sender="sim-00000",
            incarnation=n.incarnation,
            sequence=1,
            timestamp=T,
            command_endpoint="tcp://127.0.0.1:5",
        ),
        HmacSigner("s1", KEY),
    )
    assert frames == expected
    opened = open_frames(frames, lambda method, kid: HmacVerifier(KEY, owner="sim-00000"))
    assert opened.sequence == 1
    # busy: the heartbeat carries the job, as an agent's does
    n.on_commit(commit(), random.Random(1), Behaviour(), 0.0)
    busy = open_frames(
        n.heartbeat_frames("e", T), lambda method, kid: HmacVerifier(KEY, owner="sim-00000")
    )
    assert (busy.sequence, busy.job_id, busy.job_state) == (2, "j1", "committed")


def test_commit_run_succeed_with_delays():
    n, rng = node(), random.Random(1)
    how = Behaviour(commit_delay_s=0.5, run_delay_s=2.0)
    out = n.on_commit(commit(), rng, how, 0.0)
    assert out[0] == Later(0.5, m.AckCommit, {"job_id": "j1"})
    assert out[1] == ExpireAt(60.0)
    out = n.on_run(cmd(m.Run, 2, job_id="j1"), how, 1.0)
    assert out == [Later(0.0, m.AckRun, {"job_id": "j1"}), FinishAt(2.0, "j1")]
    out = n.finish("j1", rng, how, 3.0)
    assert out == [
        Later(
            0.0,
            m.Succeeded,
            {"exit_status": 0, "output": None, "job_id": "j1", "duration_ms": 2000},
        )
    ]
    assert not n.runner.busy
    # a run repeated after a failover gets the stored outcome, not a second run
    again = n.on_run(cmd(m.Run, 3, job_id="j1"), how, 4.0)
    assert again == out
    # and the job id is never committed again
    assert kinds(n.on_commit(commit(seq=4), rng, how, 5.0)) == [("Later", "nack_commit")]


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        (Behaviour(fail_rate=1.0), ("Later", "failed")),
        (Behaviour(crash_rate=1.0), ("Restart", None)),
    ],
)
def test_drawn_outcomes(how, expected):
    n, rng = node(), random.Random(3)
    n.on_commit(commit(), rng, how, 0.0)
    n.on_run(cmd(m.Run, 2, job_id="j1"), how, 0.0)
    assert kinds(n.finish("j1", rng, how, 1.0)) == [expected]


def test_nack_rate_one_nacks_every_commit():
    n = node()
    out = n.on_commit(commit(), random.Random(0), Behaviour(nack_rate=1.0), 0.0)
    assert kinds(out) == [("Later", "nack_commit")]
    assert not n.runner.busy


def test_abort_mid_run_reports_aborted_and_the_late_finish_is_ignored():
    n, rng, how = node(), random.Random(0), Behaviour(run_delay_s=5.0)
    n.on_commit(commit(), rng, how, 0.0)
    n.on_run(cmd(m.Run, 2, job_id="j1"), how, 1.0)
    out = n.on_abort(cmd(m.Abort, 3, job_id="j1"), 2.0)
    assert kinds(out) == [("Later", "aborted")]
    assert out[0].fields["duration_ms"] == 1000
    assert n.finish("j1", rng, how, 6.0) == []


def test_restart_keeps_the_journal_and_drops_the_session():
    n = node()
    n.on_commit(commit(), random.Random(0), Behaviour(), 0.0)
    before = n.incarnation
    n.restart()
    assert n.incarnation != before and not n.configured and not n.runner.busy
    assert "j1" in n.seen


def test_behaviour_problems():
    assert Behaviour().problems() == []
    assert Behaviour(fail_rate=0.7, crash_rate=0.7).problems() == [
        "fail_rate + crash_rate must not exceed 1"
    ]
    assert "nack_rate must be between 0 and 1" in Behaviour(nack_rate=2).problems()


def test_derived_keys_are_stable_and_share_one_curve_key():
    a, b = SimKeys("seed"), SimKeys("seed")
    first = a.private(7)
    assert first.public == b.private(7).public == next(b.publics(7, 1))
    assert first.name == node_name("sim-", 7) == "sim-00007"
    assert a.private(8).public.curve_public == first.public.curve_public
    assert a.private(8).public.ed25519_public != first.public.ed25519_public
    assert SimKeys("other").private(7).public.ed25519_public != first.public.ed25519_public
