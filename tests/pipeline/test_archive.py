"""The archiver: every event once, in date partitions, whatever crashes in between."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from pushjobs.errors import Rejected
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import create_standard_topics
from pushjobs.pipeline import events
from pushjobs.pipeline.archive import CRASH_HOOK, Archiver
from tests.support import wait_until

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DAY = 86_400_000
T0 = 1_790_000_000_000 - (1_790_000_000_000 % DAY)  # midnight UTC


def event(i: int) -> bytes:
    # three days of node events, a few per minute
    return orjson.dumps(
        {"ts": T0 + i * 20_000, "kind": "node_online", "node": f"n{i % 7}", "server": "s"}
    )


def make_log(path: Path, count: int, start: int = 0, bad: tuple[int, ...] = ()) -> None:
    log = open_log(LogSettings(backend="sqlite", path=path))
    try:
        topic = create_standard_topics(log).events
        batch = [
            (f"node:n{i % 7}", b"{not json" if i in bad else event(i))
            for i in range(start, start + count)
        ]
        for k in range(0, len(batch), 5000):
            log.append_batch(topic, batch[k : k + 5000])
    finally:
        log.close()


def archived_offsets(out: Path) -> list[int]:
    offsets: list[int] = []
    for path in sorted(out.glob("date=*/*.parquet")):
        offsets += pq.read_table(path).column("offset").to_pylist()
    return sorted(offsets)


def run_archiver(db: Path, out: Path, batch: int = 50_000):
    log = open_log(LogSettings(backend="sqlite", path=db))
    try:
        return Archiver(log, create_standard_topics(log).events, out, batch=batch).run()
    finally:
        log.close()


def test_parse_rejects_what_is_not_an_event():
    with pytest.raises(Rejected, match="not JSON"):
        events.parse(1, b"{")
    with pytest.raises(Rejected, match="unknown kind"):
        events.parse(1, b'{"ts": 5, "kind": "party"}')
    with pytest.raises(Rejected, match="ts is not"):
        events.parse(1, b'{"ts": "yesterday", "kind": "node_online", "node": "a"}')
    with pytest.raises(Rejected, match="node_state without node"):
        events.parse(1, b'{"ts": 5, "kind": "node_state", "job_id": "j", "state": "ready"}')
    with pytest.raises(Rejected, match="exit_status is not an integer"):
        events.parse(
            1, b'{"ts": 5, "kind": "output", "job_id": "j", "node": "a", "exit_status": "1"}'
        )
    row = events.parse(7, event(3))
    assert (row["offset"], row["node"], row["job_id"]) == (7, "n3", None)


def test_archives_by_date_once_and_incrementally(tmp_path):
    db, out = tmp_path / "log.db", tmp_path / "archive"
    make_log(db, 12_000, bad=(5, 6000))
    first = run_archiver(db, out, batch=5000)
    assert (first.archived, first.rejected, first.to_offset) == (11_998, 2, 12_000)
    assert sorted(p.name for p in out.glob("date=*")) == [
        f"date={events.day(T0 + d * DAY)}" for d in range(3)
    ]
    assert archived_offsets(out) == [i for i in range(12_000) if i not in (5, 6000)]
    rejected = [
        orjson.loads(line)
        for p in out.glob("_rejected/*.jsonl")
        for line in p.read_bytes().splitlines()
    ]
    assert [(r["offset"], r["reason"]) for r in rejected] == [(5, "not JSON"), (6000, "not JSON")]
    again = run_archiver(db, out)
    assert (again.archived, again.files, again.from_offset) == (0, 0, 12_000)
    make_log(db, 500, start=12_000)
    more = run_archiver(db, out)
    assert (more.from_offset, more.archived) == (12_000, 500)
    assert len(archived_offsets(out)) == 12_498


def archive_cmd(db: Path, out: Path, **env: str) -> subprocess.Popen[bytes]:
    full = {**os.environ, "PUSHJOBS_ARCHIVE__BATCH": "200", **env}
    argv = [sys.executable, "-m", "pushjobs.cli.app", "archive"]
    argv += ["--log", str(db), "--out", str(out), "--json", "-q"]
    return subprocess.Popen(argv, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_crash_between_files_and_commit_loses_and_duplicates_nothing(tmp_path):
    db, out = tmp_path / "log.db", tmp_path / "archive"
    make_log(db, 3000)
    proc = archive_cmd(db, out, **{CRASH_HOOK: "7"})
    assert proc.wait(timeout=120) == 70  # died with files written and the batch uncommitted
    proc.stdout.close(), proc.stderr.close()
    proc = archive_cmd(db, out)
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    summary = orjson.loads(stdout)
    assert summary["removed_partial"] >= 1
    assert archived_offsets(out) == list(range(3000))


def test_killed_at_any_moment_and_rerun_loses_and_duplicates_nothing(tmp_path):
    db, out = tmp_path / "log.db", tmp_path / "archive"
    make_log(db, 30_000)
    for _ in range(2):  # two kills at whatever point the run has reached
        proc = archive_cmd(db, out)

        def started(proc: subprocess.Popen[bytes] = proc) -> bool:
            return any(out.glob("date=*/*.parquet")) or proc.poll() is not None

        wait_until(started, 60, 0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close(), proc.stderr.close()
    proc = archive_cmd(db, out)
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert archived_offsets(out) == list(range(30_000))
    assert not list(out.rglob("*.tmp"))


def test_a_new_directory_for_a_group_that_archived_elsewhere_is_refused(tmp_path):
    db = tmp_path / "log.db"
    make_log(db, 300)
    first = archive_cmd(db, tmp_path / "a")
    assert first.wait(timeout=120) == 0
    first.stdout.close(), first.stderr.close()
    proc = archive_cmd(db, tmp_path / "b")  # the group's position is in the log: 300
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert b"has already archived the events topic up to offset 300 elsewhere" in stderr
    assert b"--group" in stderr and b"Traceback" not in stderr
    assert not list((tmp_path / "b").rglob("*.parquet"))
    argv = [sys.executable, "-m", "pushjobs.cli.app", "archive", "--log", str(db)]
    again = subprocess.run(
        [*argv, "--out", str(tmp_path / "b"), "--group", "second", "--json", "-q"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert orjson.loads(again.stdout)["archived"] == 300
    assert archived_offsets(tmp_path / "b") == list(range(300))


def test_rejected_records_move_out_of_the_readers_way(tmp_path):
    db, out = tmp_path / "log.db", tmp_path / "archive"
    make_log(db, 50, bad=(3,))
    run_archiver(db, out)
    (out / "_rejected").rename(out / "rejected")  # where an older archiver kept them
    make_log(db, 50, start=50, bad=(60,))
    result = run_archiver(db, out)
    assert (result.archived, result.rejected) == (49, 1)
    assert not (out / "rejected").exists()
    assert sorted(p.name for p in (out / "_rejected").iterdir()) == [
        f"rejected-{3:020d}-{3:020d}.jsonl",
        f"rejected-{60:020d}-{60:020d}.jsonl",
    ]


def test_the_summary_names_the_offsets_as_the_files_do(tmp_path):
    db, out = tmp_path / "log.db", tmp_path / "archive"
    make_log(db, 10)
    argv = [sys.executable, "-m", "pushjobs.cli.app", "archive", "--log", str(db), "-q"]
    first = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, check=True)
    (written,) = [p.name for p in out.glob("date=*/*.parquet")]
    assert written == "events-00000000000000000000-00000000000000000009.parquet"
    assert "10 events archived" in first.stdout and "(offsets 0..9)" in first.stdout
    again = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, check=True)
    assert "0 events archived" in again.stdout and "(no new records)" in again.stdout
