"""A standby that has just started is in the leader's ``server list`` at once: the leader
reads the control topic when asked, not only at its next renewal (up to a third of a
lease session later)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pushjobs.testbed.sandbox import Sandbox
from tests.e2e.conftest import WHITELIST, Fleet
from tests.e2e.standby import api_of, start_second_server

pytestmark = pytest.mark.e2e


def test_a_standby_just_started_is_listed_by_the_leader_at_once(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "fleet", whitelist=WHITELIST).prepare()
    fleet = Fleet(sandbox)  # its client asks the sandbox's server: the leader
    try:
        sandbox.start_server()
        assert [r["role"] for r in fleet.call("server.list")["servers"]] == ["leader"]
        standby = start_second_server(sandbox)  # ready: its record is written
        rows = fleet.call("server.list")["servers"]
        assert [(r["role"], r["api"]) for r in rows] == [
            ("leader", sandbox.api),
            ("standby", api_of(standby)),
        ]
    finally:
        fleet.close()
