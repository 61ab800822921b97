from __future__ import annotations

from pushjobs.clock import FakeClock
from pushjobs.protocol.liveness import LivenessTracker
from server.core.nodetable import NodeOffline, NodeOnline, NodeRestarted, NodeTable


def table():
    return NodeTable(LivenessTracker(interval_s=1, offline_threshold=3, online_threshold=2))


def beat(t, clock, name="n1", incarnation="i1", restarted=False, job=None):
    return t.heartbeat(
        name,
        incarnation,
        "tcp://127.0.0.1:1",
        job,
        "running" if job else None,
        restarted=restarted,
        now=clock.monotonic(),
    )


def test_online_offline_cycle():
    clock, t = FakeClock(), table()
    assert beat(t, clock) == []
    clock.advance(1)
    assert beat(t, clock) == [NodeOnline("n1")]
    assert t.is_online("n1") and list(t.online_names()) == ["n1"]
    clock.advance(3)
    assert t.expire(clock.monotonic()) == [NodeOffline("n1", clock.monotonic() - 3)]
    assert not t.is_online("n1")


def test_restart_is_reported_and_state_updated():
    clock, t = FakeClock(), table()
    beat(t, clock, job="j1")
    assert t.get("n1").job_id == "j1"
    clock.advance(1)
    events = beat(t, clock, incarnation="i2", restarted=True)
    assert NodeRestarted("n1", "i2") in events
    assert t.get("n1").incarnation == "i2" and t.get("n1").job_id is None


def test_register_keeps_facts_for_targeting():
    t = table()
    t.register("n1", "tcp://127.0.0.1:5", {"os": "linux"}, ["web"])
    (facts,) = t.facts()
    assert (facts.name, dict(facts.facts), tuple(facts.tags)) == ("n1", {"os": "linux"}, ("web",))
    assert t.get("n1").command_endpoint == "tcp://127.0.0.1:5"


def test_cut_off_removes_the_node_at_once():
    clock, t = FakeClock(), table()
    beat(t, clock)
    clock.advance(1)
    beat(t, clock)
    assert t.cut_off("n1", clock.monotonic()) == NodeOffline("n1", clock.monotonic())
    assert not t.is_online("n1") and t.get("n1") is None and len(t) == 0
    assert t.cut_off("n1", clock.monotonic()) is None
