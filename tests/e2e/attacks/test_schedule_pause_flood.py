"""A writer toggling ``schedule.pause`` and ``schedule.resume`` in a loop is bounded like
``schedule.add``: the calls take tokens from its bucket (``server/front/handlers.py`` ``RATED``),
and a pause of a paused schedule (or a resume of a running one) writes nothing
(``Scheduler.set_paused``). Before, each call rewrote the whole definition (up to ~64 KB of
env): 12,012 calls grew the log by 664 MB in 20 s on the default config.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError
from pushjobs.testbed.sandbox import Sandbox
from tests.e2e.attacks.support import ATTACK_WHITELIST, writer
from tests.e2e.conftest import WHITELIST, Fleet

pytestmark = [
    pytest.mark.e2e,
]

BURST = 5
TOGGLES = 100
ENV = {f"V{i}": "x" * 900 for i in range(60)}  # ~54 KB: within a commit frame


@pytest.fixture(scope="module")
def small_bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    sandbox = Sandbox(
        tmp_path_factory.mktemp("pauses") / "fleet",
        nodes=["node-1"],
        whitelist={**WHITELIST, **ATTACK_WHITELIST},
        server_extra={
            "jobs": {"job_starts_per_minute_per_caller": 6, "job_start_burst_per_caller": BURST}
        },
    ).prepare()
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        yield fleet
    finally:
        fleet.close()


def test_a_writers_pause_and_resume_calls_are_bounded(small_bucket: Fleet) -> None:
    wes = writer(small_bucket, "wes")
    with wes:
        refused, grown = toggle(wes, small_bucket)
    # A bucket of BURST tokens lets at most BURST + a few definitions through.
    assert refused > 0 or grown < 2 * BURST * 60_000, (refused, grown)


def toggle(wes: ApiClient, fleet: Fleet) -> tuple[int, int]:
    """Pause and resume one schedule TOGGLES times: (calls refused, bytes the log grew)."""
    added = wes.call(
        "schedule.add", {"command": "true", "nodes": ["node-1"], "cron": "0 0 1 1 *", "env": ENV}
    )
    schedule_id = added["schedule"]["schedule_id"]
    log = fleet.root / "log.db"
    before = log.stat().st_size
    refused = 0
    for i in range(TOGGLES):
        try:
            wes.call("schedule.pause" if i % 2 else "schedule.resume", {"schedule_id": schedule_id})
        except ApiError as exc:
            assert exc.code == "busy", exc
            refused += 1
    return refused, log.stat().st_size - before
