"""The README's "Running a real fleet", run as written: its own code blocks, in order.

How a section is run, and the only things replaced on a test machine (hosts, ports,
directories), is in ``tests/e2e/readme_blocks.py``. Two waits stand for a person reading
the output before going on (``FLEET_WAITS``): a node's key is accepted once it is
pending, and jobs start once the node is online. If the README changes, this test runs
the new text; if a command in it cannot work, this test fails.
"""

from __future__ import annotations

from tests.e2e.readme_blocks import FLEET, README, Walkthrough, blocks


def test_the_readme_fleet_runs_as_written(walk: Walkthrough) -> None:
    found = blocks(README.read_text(), FLEET)
    assert [kind for kind, _ in found].count("sh") >= 2, "the section lost its commands"
    for kind, body in found:
        walk.block(kind, body)
    assert [p.name for p in walk.procs] == ["pushjobs-server", "pushjobs-agent"]
    assert all(p.alive() for p in walk.procs)
    assert "web-01" in walk.output("pushjobs node list")
    watched = next(out for line, out in walk.outputs.items() if "--watch" in line)
    assert "complete: 1 succeeded" in watched
    assert "load average" in walk.output("pushjobs job output")
    assert "aborted" in walk.output("pushjobs job abort")
