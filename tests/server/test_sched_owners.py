"""``schedule show`` and ``schedule list`` name the server firing each schedule, from the
servers' membership records (issue 27, item 4), as serverd wires them."""

from __future__ import annotations

from pushjobs.clock import FakeClock
from pushjobs.log.memory import MemoryStore
from server.shell.membership import Membership
from tests.server.test_scheduler import SESSION_S, Server, every2s


def wired(server: Server, clock: FakeClock, inc: str) -> Membership:
    ends = {"api": f"tcp://h:{inc}", "heartbeat": "tcp://h:1", "reply": "tcp://h:2"}
    membership = Membership(server.leadership, "server", inc, ends, clock)
    membership.partitions = server.scheduler.partitions.owned
    server.scheduler.owners = membership.owners
    return membership


def test_a_schedule_names_its_partition_and_the_server_firing_it() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    membership = wired(a, clock, "aa11")
    sid = every2s(a)["schedule_id"]
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert shown["partition"].startswith("pushjobs.schedules.") and shown["owner"] is None
    a.tick()  # a owns every partition now, and says so
    membership.beat_if_moved()
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert shown["owner"] == "server:aa11"
    [listed] = a.call("schedule.list")["schedules"]
    assert listed["owner"] == "server:aa11"
    [row] = membership.rows()
    assert row["partitions"] == sorted(a.scheduler.partitions.owned())
    assert len(row["partitions"]) == len(a.scheduler.catalog.topics)
    # a standby joins and takes its share: each partition is named by one server only
    b = Server(store, clock, "b")
    other = wired(b, clock, "bb22")
    b.scheduler.tick(clock.wall_ms())
    clock.advance(SESSION_S / 3)
    a.tick()
    b.scheduler.renew_at_ms = 0
    b.scheduler.tick(clock.wall_ms())
    membership.beat_if_moved()
    other.beat_if_moved()
    clock.advance(0.2)
    owners = membership.owners()
    assert set(owners) == set(a.scheduler.catalog.topics)
    assert {t for t, o in owners.items() if o == "server:bb22"} == b.scheduler.partitions.owned()
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert shown["owner"] == owners[shown["partition"]]
