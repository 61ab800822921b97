"""``pushjobs server status``'s block: every figure in a line an operator reads at a glance,
and a reply from an older server (fewer figures) still rendered."""

from __future__ import annotations

from pushjobs.cli.server_commands import duration, render
from tests.server.test_metrics import INFO


def test_the_block_has_one_line_per_concern() -> None:
    assert render(INFO).splitlines() == [
        "server      server (incarnation 0123abcd), leader, epoch 4, up 12s",
        "nodes       3 online, 2 offline, 1 pending",
        "jobs        1 running, 7 complete",
        "drops       api: 5 frame; reply: 3 bad_signature, 1 replay",
        "heartbeats  lag p50 3 ms, p99 2000 ms, max 2000 ms (6 heartbeats)",
        "reading     BEHIND: messages waiting to be read; nobody is judged offline meanwhile "
        "(offline checks put off 2 times, stalled once since start)",
        "log         append p50 2 ms, p99 5 ms, max 4.5 ms (4 appends, 2 failed)",
        "gc          paused 47 ms in total, longest 40 ms (13 collections, 1 full)",
    ]


def test_a_log_outage_and_standing_by_are_said_plainly() -> None:
    info = {
        **INFO,
        "leader": False,
        "epoch": None,
        "log_outage": {
            "error": "log.db: the disk holding the log is full",
            "for_s": 75.0,
            "tries": 9,
        },
    }
    text = render(info)
    assert "standing by (not leader)" in text
    assert (
        "log         NOT WRITABLE for 1m 15s (9 tries): log.db: the disk holding the log is full"
        in text
    )


def test_a_server_that_caught_up_says_what_it_went_through_and_one_never_behind_nothing() -> None:
    caught_up = render({**INFO, "backlog": False})
    assert (
        "reading     keeping up now; offline checks put off 2 times, stalled once since start"
        in caught_up.splitlines()
    )
    calm = render({**INFO, "backlog": False, "expiry_deferred": 0, "stalls": 0})
    assert "reading" not in calm


def test_no_drops_and_no_jobs_read_none() -> None:
    info = {**INFO, "drops": {"reply": {}, "api": {"frame": 0}}, "jobs": {"running": 0}}
    lines = dict(line.split(None, 1) for line in render(info).splitlines())
    assert lines["drops"] == "none" and lines["jobs"] == "none"


def test_an_older_server_without_the_new_figures_still_renders() -> None:
    old = {k: INFO[k] for k in ("server_id", "incarnation", "leader", "epoch", "nodes_online")}
    assert render(old).splitlines() == [
        "server  server (incarnation 0123abcd), leader, epoch 4",
        "nodes   3 online",
        "drops   none",
    ]


def test_durations_show_their_two_largest_units() -> None:
    assert [duration(s) for s in (42, 312, 7380, 273600)] == ["42s", "5m 12s", "2h 03m", "3d 4h"]


def test_latencies_read_alike_whatever_their_size() -> None:
    from pushjobs.cli.server_commands import _ms

    assert [_ms(v) for v in (0.7, 3.062, 42.4, None)] == ["0.7 ms", "3.1 ms", "42 ms", "-"]


def test_an_edge_of_its_own_says_so_and_once_lost_counts_no_nodes() -> None:
    edge = {"edge": "far-1", "remote": True, "pid": 77, "online": 3, "nodes": 3, "lag_p99_ms": 1}
    serving = render({**INFO, "edges": [{**edge, "live": True}]})
    assert "far-1 serving (an edge of its own), pid 77, 3 of 3 nodes online" in serving
    lost = render({**INFO, "edges": [{**edge, "live": False, "losses": 1}]})
    assert "far-1 NOT SERVING (lost: its nodes moved), pid 77, 0 of 0 nodes online" in lost
    started_here = render({**INFO, "edges": [{**edge, "remote": False, "live": False}]})
    assert "far-1 NOT SERVING (restarting)" in started_here
