"""docs/high-availability.md, run as written: its code blocks, in order.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``),
as a reader would; the blocks run as ``tests/e2e/doc_recipes.py`` says (the hosts, ports
and directories replaced on a test machine). Beyond the page's lines, the test does what
the page is about: the leader killed (``kill -9``), and the fleet's own job run on the
new leader.

Its Kafka section runs on three real brokers (``pushjobs.testbed.kafkabroker``) started
with Kafka's defaults and the page's ``server.properties`` lines, nothing else; the same
walk as on SQLite, with the page's ``[log]`` lines in every server's config before its
first start, then what the page says the brokers hold is checked on them. Last, the
page's ``pushjobs audit verify`` line checks the trail both leaders wrote on the brokers,
and names the records a forger with write access to the cluster appends: a checkpoint
signed with another key, an event of no server's.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from pushjobs.audit import checkpoint
from pushjobs.audit.chain import EMPTY, Head, link_batch
from pushjobs.log.base import DEFAULT_MAX_VALUE_BYTES
from pushjobs.log.kafka.kafka_log import FRAMING_BYTES, KafkaLog
from pushjobs.log.topics import names
from pushjobs.testbed.childproc import Proc, stop_all
from pushjobs.testbed.kafkabroker import KafkaCluster
from pushjobs.testbed.sandbox import ready_fields
from tests.audit.trail import keypair
from tests.e2e.doc_recipes import (
    DOCS,
    FLEET,
    FLEET_PAGE,
    FLEET_WAITS,
    Walkthrough,
    blocks,
    blocks_before,
    commands,
    files,
    properties,
    set_up_fleet,
)
from tests.kafka_broker import broker_unavailable, skip_or_fail
from tests.support import wait_until

PAGE = DOCS / "high-availability.md"
KAFKA = "## The log on Kafka"
BROKERS = "### The brokers"
KAFKA_SERVERS = "### The servers"
# The page's brokers, in the order of its bootstrap_servers.
BROKER_HOSTS = ("10.0.0.11:9092", "10.0.0.12:9092", "10.0.0.13:9092")
AUDIT_VERIFY = "pushjobs audit verify"


def fleet_line(prefix: str) -> str:
    """The first command of docs/fleet.md's "Running a real fleet" that starts with
    ``prefix``."""
    found = (c for _, body in blocks(FLEET_PAGE, FLEET) for c in commands(body))
    return next(c for c in found if c.startswith(prefix))


def leads(walk: Walkthrough, server: Proc) -> bool:
    """Whether ``server`` is the one leader the installation lists."""
    listed = walk.json("pushjobs server list")
    if not isinstance(listed, list):
        return False
    api = ready_fields(server.ready_line)["api"]
    return [s["api"] for s in listed if s["role"] == "leader"] == [api]


def both_listed(walk: Walkthrough) -> bool:
    listed = walk.json("pushjobs server list")
    return isinstance(listed, list) and len(listed) == 2


def two_servers(walk: Walkthrough, after_files=None) -> tuple[Proc, Proc, Proc]:
    """The page above its Kafka section, on the fleet: the leader, the (restarted) agent
    and the standby."""
    leader, agent = walk.daemon("pushjobs-server"), walk.daemon("pushjobs-agent")
    found = blocks_before(PAGE, KAFKA)
    assert [kind for kind, _ in found].count("sh") >= 2, "the page lost its commands"
    for kind, body in found:
        written = walk.write(body) if kind == "toml" else []
        if written and after_files is not None:
            after_files()
        if kind == "sh":
            walk.block(kind, body)
        if any(path.name == "agent.toml" for path in written):
            # An agent reads its servers when it starts: restarted, as the page says
            # (Ctrl-C and ``pushjobs-agent`` again).
            agent = walk.restart(agent)
    return leader, agent, walk.daemon("pushjobs-server", 1)


def test_several_servers_the_standby_leads_when_the_leader_dies(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    # The leader reads the others' records at its lease renewals: a standby just ready
    # shows up in its list within one (a third of leader_session_s), as the page says.
    walk.waits["pushjobs server list"] = both_listed
    leader, agent, standby = two_servers(walk)
    assert ready_fields(standby.ready_line)["leader"] == "no"
    before = walk.output("pushjobs server list --json")
    roles = sorted(s["role"] for s in json.loads(before))
    assert roles == ["leader", "standby"]
    assert "standby" in walk.output("pushjobs server list")

    leader.kill()  # kill -9: the fault this section is about
    wait_until(partial(leads, walk, standby), 30.0, 0.2)
    # The operator's CLI and the node follow: the fleet's own job, on the new leader, once
    # the node is back online (FLEET_WAITS).
    ran = walk.run(fleet_line("pushjobs job start uptime 'web-*'"))
    assert "complete: 1 succeeded" in ran.stdout
    assert agent.alive() and standby.alive()
    listed = walk.json("pushjobs server list")
    assert isinstance(listed, list), listed
    dead = [s["role"] for s in listed if s["api"] == ready_fields(leader.ready_line)["api"]]
    assert dead in (["deposed"], ["gone"]), listed
    # Prometheus still sees the installation: the new leader serves its metrics (fails
    # while server-b.toml shares server.toml's default metrics port, 9464).
    fields = ready_fields(standby.ready_line)
    assert "metrics" in fields, f"the standby serves no metrics: {standby.log_text()[-800:]}"
    with urllib.request.urlopen(fields["metrics"], timeout=10) as answer:
        assert "pushjobs_leader 1" in answer.read().decode()


@pytest.fixture
def three_brokers(tmp_path: Path) -> Iterator[KafkaCluster]:
    """Three brokers with Kafka's defaults and the page's ``server.properties`` lines."""
    reason = broker_unavailable()
    if reason is not None:
        skip_or_fail(reason)
    settings = properties(PAGE, BROKERS)
    with KafkaCluster(tmp_path / "kafka", nodes=3, tuned=False, settings=settings) as cluster:
        yield cluster


def describe(bootstrap: str, kind: str, name: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer
    (future,) = admin.describe_configs([ConfigResource(getattr(ResourceType, kind), name)]).values()
    return {key: entry.value for key, entry in future.result(timeout=10).items()}


def replicas(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas)


@pytest.mark.kafka
def test_on_kafka_three_brokers_as_the_page_sets_them_up(
    tmp_path: Path, three_brokers: KafkaCluster
) -> None:
    hosts = [f"127.0.0.1:{node.port}" for node in three_brokers.members]
    walk = Walkthrough(tmp_path / "walk", FLEET_WAITS, extra=zip(BROKER_HOSTS, hosts, strict=True))
    on_kafka = [
        (name, text)
        for kind, body in blocks(PAGE, KAFKA_SERVERS)
        if kind == "toml"
        for name, text in files(body)
    ]
    assert on_kafka, "the page lost its servers' [log] lines"

    def log_on_kafka() -> None:
        """The page's [log] lines, in every server config written so far."""
        for name, text in on_kafka:
            if walk.path(name).exists():
                walk.write(text)

    try:
        set_up_fleet(walk, after_files=log_on_kafka)
        walk.waits["pushjobs server list"] = both_listed
        leader, agent, standby = two_servers(walk, after_files=log_on_kafka)
        assert ready_fields(standby.ready_line)["leader"] == "no"
        for kind, body in blocks(PAGE, KAFKA_SERVERS):
            if kind == "sh" and not commands(body)[0].startswith(AUDIT_VERIFY):
                walk.block(kind, body)  # the audit check comes last, once the jobs ran
        topics = walk.output("pushjobs log topics")
        standard = names().all()
        assert all(topic in topics for topic in standard), topics
        assert "leader" in walk.output("pushjobs server list")

        # What the page says the brokers hold.
        bootstrap = three_brokers.bootstrap
        for topic in (*standard, "__pushjobs-fence", "__pushjobs-topics"):
            assert replicas(bootstrap, topic) == 3, topic
            config = describe(bootstrap, "TOPIC", topic)
            assert config["min.insync.replicas"] == "2", (topic, config)
            assert config["max.message.bytes"] == str(DEFAULT_MAX_VALUE_BYTES + FRAMING_BYTES)
        assert describe(bootstrap, "TOPIC", names().commands)["cleanup.policy"] == "compact"
        group = describe(bootstrap, "GROUP", "pushjobs.leader")  # leader_session_s: 5 s
        assert group["consumer.session.timeout.ms"] == "5000"
        assert group["consumer.heartbeat.interval.ms"] == "1000"

        # A schedule fires (its partitions' classic group joined), then the leader dies.
        added = walk.run("pushjobs schedule add uptime web-01 --in 2s").stdout
        schedule_id = added.split()[1].rstrip(":")
        wait_until(partial(fired, walk, schedule_id), 30.0, 0.2)
        leader.kill()  # kill -9
        wait_until(partial(leads, walk, standby), 30.0, 0.2)
        ran = walk.run(fleet_line("pushjobs job start uptime 'web-*'"))
        assert "complete: 1 succeeded" in ran.stdout
        assert agent.alive() and standby.alive()
        assert "refuse" not in standby.log_text()
        audit_trail_on_kafka(walk, standby, bootstrap)
    finally:
        walk.close()


def audit_trail_on_kafka(walk: Walkthrough, leader: Proc, bootstrap: str) -> None:
    """The page's ``audit verify`` line on the trail the two leaders wrote (the first
    killed, its chains continued by the second), then on the cluster with forged records
    appended."""
    (line,) = [
        c
        for kind, body in blocks(PAGE, KAFKA_SERVERS)
        if kind == "sh"
        for c in commands(body)
        if c.startswith(AUDIT_VERIFY)
    ]
    stop_all([leader], 10.0)  # a clean stop signs a last checkpoint: every chain sealed
    checked = walk.run(line).stdout
    assert checked.rstrip().endswith("OK: no record altered, missing or reordered"), checked
    topics = names()
    # The first leader's events (the node online, the schedule's fire) and the second's
    # (the job after the kill): one chain across both leaders, which the second continued
    # (it started none of its own) and sealed as it stopped; no late write of the first.
    (events,) = [row for row in checked.splitlines() if row.startswith(f"{topics.events}: ")]
    counted = re.fullmatch(r".*: (\d+) records, (\d+) chained, (\d+) sealed", events)
    assert counted is not None and int(counted[1]) >= 6, events
    assert len(set(counted.groups())) == 1, events
    assert "starts at offset" not in checked and "signed checkpoint" in checked, checked

    forger, _ = keypair()
    body = checkpoint.Checkpoint(
        "server",
        1,
        forger.key_id,
        (checkpoint.ChainState(topics.events, "pushjobs.leader", Head(0, bytes(32))),),
    )
    forged = link_batch(
        "server/forged", EMPTY, [("checkpoint:server", checkpoint.encode(body, forger))]
    )
    log = KafkaLog(bootstrap)
    try:
        (bad_checkpoint,) = log.append_batch(topics.audit, forged.batch)
        (stray,) = log.append_batch(topics.events, [("job:x", b'{"kind":"job_created"}')])
    finally:
        log.close()
    tampered = verified(walk, line)
    spots = {(p["topic"], p["offset"], p["what"]) for p in tampered["problems"]}
    assert (topics.audit, bad_checkpoint, "bad signature") in spots, tampered["problems"]
    assert tampered["first"] == {
        "topic": topics.events,
        "offset": stray,
        "what": "unchained",
        "detail": "an object with no _chain field",
    }, tampered


def verified(walk: Walkthrough, line: str) -> dict[str, Any]:
    """``line --json``'s report; its exit code 0 for a clean log, 1 for a tampered one."""
    result = walk.bash(walk.apply(f"{line} --json"))
    report: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == (0 if report["ok"] else 1), result.stderr
    return report


def fired(walk: Walkthrough, schedule_id: str) -> bool:
    """Whether the schedule's fire started a job that completed."""
    history = walk.json(f"pushjobs schedule history {schedule_id}")
    fires = history.get("fires", []) if isinstance(history, dict) else []
    return any(fire.get("job_state") == "complete" for fire in fires)
