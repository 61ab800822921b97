"""``pushjobs schedule show``: which server fires a schedule (issue 27, item 4), how it runs."""

from __future__ import annotations

from pushjobs.cli.schedule_commands import _owner, job_text


def test_the_owner_and_the_partition_are_named() -> None:
    shown = {"partition": "pushjobs.schedules.3", "owner": "server-b:1a2b"}
    assert _owner(shown) == "server-b:1a2b (partition 3)"


def test_no_owner_yet_is_said_plainly_and_an_old_server_shows_a_dash() -> None:
    orphan = {"partition": "pushjobs.schedules", "owner": None}
    assert _owner(orphan).startswith("no live server yet (partition old")
    assert _owner({}) == "-"


def test_how_each_fire_runs_names_only_the_options_set() -> None:
    assert job_text({"quorum": "100%", "options": {"env": {}}}) == "quorum 100%"
    job = {
        "quorum": "90%",
        "busy_wait_s": 300.0,
        "offline_wait_s": 28800.0,
        "options": {
            "batch": {"size": "2", "wait_s": 5.0, "max_failures": "1"},
            "halt_if": {"check": None, "alert": "HighErrorRate", "every_s": 30.0},
        },
    }
    assert job_text(job) == (
        "quorum 90%; batch 2 every 5s, at most 1 failures; busy wait 300s; "
        "offline wait 28800s; halt-if alert 'HighErrorRate' every 30s"
    )
