"""The fleet the attack tests share, started again if an attack killed its server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.attacks.support import (
    ATTACK_WHITELIST,
    responsive,
    server_alive,
)
from tests.e2e.conftest import Fleet, make_fleet


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(
        tmp_path_factory.mktemp("attacks"), nodes=["node-1"], whitelist=ATTACK_WHITELIST
    )
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def fleet(shared: Fleet) -> Fleet:
    """The shared fleet, its server started again if an earlier test's attack killed it
    (an attack that killed it must not take the tests after it down too)."""
    if not responsive(shared):
        if server_alive(shared):  # dying, or hung: gone for good before the restart
            shared.sandbox.kill("server")
        shared.reconnect()
        shared.sandbox.start_server()
        shared.wait_online()
    return shared
