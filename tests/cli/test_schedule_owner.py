"""``pushjobs schedule show`` says which server fires a schedule (issue 27, item 4)."""

from __future__ import annotations

from pushjobs.cli.schedule_commands import _owner


def test_the_owner_and_the_partition_are_named() -> None:
    shown = {"partition": "pushjobs.schedules.3", "owner": "server-b:1a2b"}
    assert _owner(shown) == "server-b:1a2b (partition 3)"


def test_no_owner_yet_is_said_plainly_and_an_old_server_shows_a_dash() -> None:
    orphan = {"partition": "pushjobs.schedules", "owner": None}
    assert _owner(orphan).startswith("no live server yet (partition old")
    assert _owner({}) == "-"
