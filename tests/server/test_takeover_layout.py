"""A new leader rewrites restored jobs whole, whatever layout the old leader wrote."""

from __future__ import annotations

import io

import orjson

from pushjobs.clock import FakeClock
from pushjobs.config import load_config
from pushjobs.log.factory import open_log
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.messages import AckCommit
from pushjobs.testbed.sandbox import Sandbox
from server.core.job import Job
from server.serverd import Server
from server.shell.recovery import recover
from server.shell.serverconfig import ServerConfig


def test_a_job_from_an_unchunked_snapshot_survives_the_next_restart(tmp_path) -> None:
    sandbox = Sandbox(tmp_path, nodes=[]).prepare()
    config = load_config(ServerConfig, sandbox.server_config_path)
    clock = FakeClock()
    names = [f"n{i:04d}" for i in range(1001)]
    job = Job.new("old", "true", names, clock.wall_ms())
    job.start(names, clock.wall_ms())  # voting: active, so the new leader takes it on
    log = open_log(config.log)
    topics = create_standard_topics(log, config.log.topic_prefix)
    # The one-record layout of the first releases: the whole node table in the header.
    log.append(topics.assignments, "job:old", orjson.dumps(job.snapshot()))
    log.close()

    server = Server(config, clock=clock, out=io.StringIO())
    try:
        server.tenure.renew(clock.monotonic())
        assert server.leadership.leader
        restored = server.jobs.coordinator.jobs["old"]
        assert restored.chunks == 3  # 500-node chunks: the size an unsized snapshot implies
        # One reply touches only the last chunk; the earlier ones must already be there.
        server.jobs.changes += server.jobs.coordinator.reply(
            AckCommit(
                sender=names[-1],
                incarnation="i1",
                sequence=1,
                timestamp=clock.wall_ms(),
                job_id="old",
            ),
            clock.wall_ms(),
        )
        server.flush()
        found = recover(server.log, server.topics)
        assert found.damaged == []
        [(again, _)] = found.jobs
        assert again.nodes[names[-1]].state.value == "ready"
        assert again.nodes[names[0]].state.value == "new"
    finally:
        server.close()
