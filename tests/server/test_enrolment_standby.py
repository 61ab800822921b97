"""A standby serves no node: its answer to a config request names the leader, and it
admits nobody, not even as pending."""

from __future__ import annotations

from pathlib import Path

from keys.identity import generate
from keys.keystates import KeyState
from pushjobs.clock import FakeClock
from tests.server.test_enrolment import Setup
from tests.server.test_membership import SESSION_S, two


def test_a_standby_answers_not_leader_naming_the_leader_and_admits_nobody(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    leader, standby = two(FakeClock())
    setup.enrolment.membership = standby.membership
    reply = setup.ask(generate("web-1", "node"))
    assert reply.status == "not_leader" and reply.config is None
    assert reply.leader == "tcp://h:a"
    assert "the leader is at tcp://h:a" in reply.message
    assert setup.registry.find("web-1") is None  # not even pending
    assert setup.nodes.get("web-1") is None
    # The leader itself serves as before.
    setup.enrolment.membership = leader.membership
    reply = setup.ask(generate("web-1", "node"))
    assert reply.status == "accepted" and reply.config is not None and reply.leader is None
    entry = setup.registry.find("web-1")
    assert entry is not None and entry.state is KeyState.ACCEPTED


def test_a_standby_that_knows_no_leader_says_so(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    clock = FakeClock()
    _leader, standby = two(clock)
    clock.advance(2 * SESSION_S)  # the leader's record is stale; nobody took over yet
    setup.enrolment.membership = standby.membership
    reply = setup.ask(generate("web-1", "node"))
    assert reply.status == "not_leader" and reply.leader is None
    assert "no leader is known yet" in reply.message
