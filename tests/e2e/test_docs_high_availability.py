"""docs/high-availability.md, run as written: its code blocks, in order.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``),
as a reader would; the blocks run as ``tests/e2e/doc_recipes.py`` says (the hosts, ports
and directories replaced on a test machine). Beyond the page's lines, the test does what
the page is about: the leader killed (``kill -9``), and the fleet's own job run on the
new leader.
"""

from __future__ import annotations

import json
import urllib.request
from functools import partial

from pushjobs.testbed.childproc import Proc
from pushjobs.testbed.sandbox import ready_fields
from tests.e2e.doc_recipes import (
    DOCS,
    FLEET,
    FLEET_PAGE,
    Walkthrough,
    blocks,
    commands,
    set_up_fleet,
)
from tests.support import wait_until

PAGE = DOCS / "high-availability.md"


def fleet_line(prefix: str) -> str:
    """The first command of docs/fleet.md's "Running a real fleet" that starts with
    ``prefix``."""
    found = (c for _, body in blocks(FLEET_PAGE, FLEET) for c in commands(body))
    return next(c for c in found if c.startswith(prefix))


def leads(walk: Walkthrough, server: Proc) -> bool:
    """Whether ``server`` is the one leader the installation lists."""
    listed = walk.json("pushjobs server list")
    if not isinstance(listed, list):
        return False
    api = ready_fields(server.ready_line)["api"]
    return [s["api"] for s in listed if s["role"] == "leader"] == [api]


def both_listed(walk: Walkthrough) -> bool:
    listed = walk.json("pushjobs server list")
    return isinstance(listed, list) and len(listed) == 2


def test_several_servers_the_standby_leads_when_the_leader_dies(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    # The leader reads the others' records at its lease renewals: a standby just ready
    # shows up in its list within one (a third of leader_session_s), as the page says.
    walk.waits["pushjobs server list"] = both_listed
    leader, agent = walk.daemon("pushjobs-server"), walk.daemon("pushjobs-agent")
    found = blocks(PAGE)
    assert [kind for kind, _ in found].count("sh") >= 2, "the page lost its commands"
    for kind, body in found:
        written = walk.write(body) if kind == "toml" else []
        if kind == "sh":
            walk.block(kind, body)
        if any(path.name == "agent.toml" for path in written):
            # An agent reads its servers when it starts: restarted, as the page says
            # (Ctrl-C and ``pushjobs-agent`` again).
            agent = walk.restart(agent)
    standby = walk.daemon("pushjobs-server", 1)
    assert ready_fields(standby.ready_line)["leader"] == "no"
    before = walk.output("pushjobs server list --json")
    roles = sorted(s["role"] for s in json.loads(before))
    assert roles == ["leader", "standby"]
    assert "standby" in walk.output("pushjobs server list")

    leader.kill()  # kill -9: the fault this section is about
    wait_until(partial(leads, walk, standby), 30.0, 0.2)
    # The operator's CLI and the node follow: the fleet's own job, on the new leader, once
    # the node is back online (FLEET_WAITS).
    ran = walk.run(fleet_line("pushjobs job start uptime 'web-*'"))
    assert "complete: 1 succeeded" in ran.stdout
    assert agent.alive() and standby.alive()
    listed = walk.json("pushjobs server list")
    assert isinstance(listed, list), listed
    dead = [s["role"] for s in listed if s["api"] == ready_fields(leader.ready_line)["api"]]
    assert dead in (["deposed"], ["gone"]), listed
    # Prometheus still sees the installation: the new leader serves its metrics (fails
    # while server-b.toml shares server.toml's default metrics port, 9464).
    fields = ready_fields(standby.ready_line)
    assert "metrics" in fields, f"the standby serves no metrics: {standby.log_text()[-800:]}"
    with urllib.request.urlopen(fields["metrics"], timeout=10) as answer:
        assert "pushjobs_leader 1" in answer.read().decode()
