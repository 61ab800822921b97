"""Broker faults on three real Kafka brokers (issue 26, item 3): two servers and three real
agents on a cluster of three KRaft nodes (replication factor 3, ``min.insync.replicas``
2), a job running when the fault comes and a schedule due while it lasts.

- the broker leading the ``commands`` partition killed with SIGKILL mid-job;
- that broker stopped (SIGSTOP) past its broker session, then resumed;
- every broker killed, the cluster held down 14 s, then started again on its data;
- one broker's disk full (its log directory a tmpfs of its own, filled up mid-job).

The suite runs the first; the other three are drills (``bench/drills.py``): long, and the
same safety checks as the first.

For each: the job acknowledged before the fault and the schedule added before it each
complete, once the cluster serves; every node ran the job and the schedule's job exactly
once (each run journals its start and end in ``runs-NODE``); the schedule fired once. With
one broker down the servers carry on (two replicas of three are in sync): no outage of the
log; the lease may move (when the broker down coordinated the leader group, about one CI
run in three, and now and then otherwise, when a heartbeat times out on two busy cores),
so the check is that both servers live and one leads after. With the whole cluster down
the leader says so (``log_outage``, its log line) and stands by until the brokers are
back; then one server leads again.

The cluster is the module's own, started once; each test begins with its three brokers
serving (a killed one restarted, a stopped one resumed, a full disk emptied) and puts its
servers under a topic prefix of its own. Node 3's log directory is a tmpfs of its own
where one can be mounted (root, or CAP_SYS_ADMIN); elsewhere the disk-full case skips,
saying why.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pushjobs.testbed.kafkabroker import TEST_SETTINGS, KafkaCluster
from tests.e2e.conftest import TERMINAL
from tests.e2e.conftest import WHITELIST as BASE_WHITELIST
from tests.e2e.standby import SECOND
from tests.e2e.test_standby import Pair
from tests.e2e.test_standby_kafka import Kafka, info_of, kafka_pair
from tests.kafka_broker import broker_unavailable, server_log, skip_or_fail
from tests.support import wait_until
from tests.tmpfs import fill

pytestmark = [pytest.mark.e2e, pytest.mark.kafka]

# The servers' leader_session_s, the leader group's session at the broker: longer than the
# brokers' broker.session.timeout.ms (3 s here), with room to spare. A broker that dies
# without closing its connections, or hangs, is fenced by the controller only after that;
# if it was the leader group's coordinator, the members hear nothing from any coordinator
# meanwhile, and a session not well beyond that expires them all and moves the lease
# (docs/high-availability.md, "When brokers fail"): the sandbox's 1.5 s always did, 4 s
# one run in three, 6 s one run in five (librdkafka counts the session from the last
# heartbeat answered, up to a heartbeat interval before the fault). Longer also keeps a
# server starved of the CPU by three JVMs on two cores from handing over the lease in the
# middle of a one-broker fault.
SESSION_S = 8.0
# The agents leave a silent server after silence_factor offline windows (0.6 s each in the
# sandbox): later than a takeover (the session and a renewal), as the defaults are, and
# later than the servers' loop may wait on a broker that fails without closing its
# connections (a request's timeout, 10 s): a node that gave up on its server meanwhile is
# offline when it comes back, and a fire started then fails its quorum
# (docs/high-availability.md, "When brokers fail").
SILENCE_FACTOR = 20
DISK_NODE = 3
DISK_BYTES = 64 * 2**20  # room for a test's topics; filled up on purpose
OUTAGE_S = 14.0  # past the leader's first timed-out request (10 s) and its lease
SETTLE_S = 90.0  # a job or a fire to settle once the cluster serves: two busy cores
OUTAGE_LINE = "the ordered log cannot be written"

WHITELIST = {
    **BASE_WHITELIST,
    # Journals each run's start and end: how often each (job, node) ran, and that it ended.
    "journal-(?P<seconds>[0-9]+)": "sh -c 'echo start $PUSHJOBS_JOB_ID >> "
    '"$PUSHJOBS_HOME/runs-$PUSHJOBS_NODE"; sleep {seconds}; '
    'echo end $PUSHJOBS_JOB_ID >> "$PUSHJOBS_HOME/runs-$PUSHJOBS_NODE"\'',
}


@dataclass
class Brokers:
    cluster: KafkaCluster
    disk: Path | None
    """Node 3's log directory, a tmpfs of its own; None where none could be mounted."""
    no_disk: str
    """Why there is no tmpfs (empty when there is one)."""


@contextlib.contextmanager
def small_disk(parent: Path) -> Iterator[tuple[Path | None, str]]:
    """A tmpfs of ``DISK_BYTES`` under ``parent``, (None, why) where mounting is refused."""
    mount = parent / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        yield None, f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}"
        return
    try:
        yield mount, ""
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    reason = broker_unavailable()
    if reason is not None:
        skip_or_fail(reason)
    root = tmp_path_factory.mktemp("brokers")
    with contextlib.ExitStack() as stack:  # the brokers stop before their disk goes
        disk, why = stack.enter_context(small_disk(root))
        log_dirs = {DISK_NODE: disk} if disk is not None else {}
        cluster = stack.enter_context(KafkaCluster(root / "kafka", nodes=3, log_dirs=log_dirs))
        yield Brokers(cluster, disk, why)
        # Thrown away: after the faults a controlled shutdown of the three took the whole
        # grace (10 s of the suite); a second, then SIGKILL, as for any node the tests kill.
        cluster.stop(grace_s=1.0)


@pytest.fixture
def cluster(brokers: Brokers) -> Iterator[KafkaCluster]:
    """The module's cluster with its three brokers serving (whatever the last test did)."""
    found = brokers.cluster
    if brokers.disk is not None:
        (brokers.disk / "filler").unlink(missing_ok=True)  # tests.tmpfs.fill's
    for node in found.members:
        if node.running():
            os.kill(node.pid, signal.SIGCONT)
        else:
            found.restart(node.node_id, wait=False)
    found.wait_serving(60)
    try:
        yield found
    finally:
        for node in found.members:
            if node.running():
                os.kill(node.pid, signal.SIGCONT)


@dataclass
class Scene:
    """A pair of servers on the cluster, a job running and a schedule added."""

    pair: Pair
    cluster: KafkaCluster
    prefix: str
    job_id: str = ""
    schedule_id: str = ""
    marks: dict[str, int] = field(default_factory=dict)
    """Each server's log length when the fault began."""

    @property
    def servers(self) -> list[str]:
        return ["server", SECOND]

    def leader_broker(self, suffix: str) -> int:
        """The broker leading partition 0 of the servers' topic ``suffix``."""
        from confluent_kafka.admin import AdminClient

        topic = self.prefix + suffix
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader)

    def begin(self, *, job_s: int, schedule_in_s: float) -> None:
        """A job of ``job_s`` seconds on every node, running; a one-shot schedule due in
        ``schedule_in_s`` (a one-second job on every node)."""
        self.job_id = self.pair.start(f"journal-{job_s}")["job_id"]
        for name in self.pair.sandbox.nodes:
            self.pair.wait_node_state(self.job_id, name, "running", timeout_s=30)
        params = {"command": "journal-1", "nodes": self.pair.sandbox.nodes, "in_s": schedule_in_s}
        self.schedule_id = self.pair.call("schedule.add", params)["schedule"]["schedule_id"]

    def leader(self) -> str | None:
        """The one server leading (its process name), None while there is none."""
        apis = {self.pair.sandbox.api: "server", self.pair.standby_api: SECOND}
        leading = [
            name for api, name in apis.items() if (info_of(self.pair, api) or {}).get("leader")
        ]
        assert len(leading) <= 1, f"two leaders: {leading}"
        return leading[0] if leading else None

    def fires(self) -> list[dict[str, Any]] | None:
        found = self.pair.call_served("schedule.history", {"schedule_id": self.schedule_id})
        return None if found is None else list(found["fires"])

    def settle(self) -> tuple[dict[str, Any], str]:
        """Wait for the job and the schedule's job to end: (the job, the fired job's id)."""
        job = self.pair.wait_job(self.job_id, timeout_s=SETTLE_S)

        def fired() -> str | None:
            fires = self.fires() or []
            ended = [f for f in fires if f.get("job_state") in TERMINAL]
            return str(ended[0]["job_id"]) if ended else None

        fired_job = wait_until(fired, SETTLE_S, 0.2)
        return job, fired_job

    def runs(self) -> Counter[tuple[str, str, str]]:
        """(start or end, job, node) -> how often each node's journal says so."""
        counted: Counter[tuple[str, str, str]] = Counter()
        for node in self.pair.sandbox.nodes:
            path = self.pair.root / f"runs-{node}"
            for line in path.read_text().splitlines() if path.exists() else []:
                what, job = line.split()
                counted[(what, job, node)] += 1
        return counted

    def check_once(self) -> str:
        """The job and the fired one complete, each ran once on every node, the schedule
        fired once, nothing else ran; the fired job's id."""
        job, fired_job = self.settle()
        assert job["state"] == "complete" and job["summary"] == {"succeeded": 3}, job
        fired = self.pair.status(fired_job)
        assert fired["state"] == "complete" and fired["summary"] == {"succeeded": 3}, fired
        fires = self.fires()
        assert fires is not None and len(fires) == 1, fires
        both, nodes = ("start", "end"), self.pair.sandbox.nodes
        jobs = (self.job_id, fired_job)
        expected = Counter({(w, j, n): 1 for w in both for j in jobs for n in nodes})
        assert self.runs() == expected, self.runs()
        return fired_job

    def logs(self, name: str) -> str:
        return self.pair.sandbox.procs[name].log_text()

    def fault(self) -> str:
        """The fault begins now: the server leading then."""
        leader = wait_until(self.leader, 30)
        self.marks = {name: len(self.logs(name)) for name in self.servers}
        return leader

    def since_fault(self, name: str) -> str:
        return self.logs(name)[self.marks.get(name, 0) :]

    def live_through(self) -> None:
        """One broker down: the lease may move (librdkafka's member gives its partition up
        when a heartbeat to a hung or busy coordinator times out; docs/high-availability.md,
        "When brokers fail"), safely: both servers alive, no outage of the log, one leader
        after."""
        for name in self.servers:
            assert self.pair.sandbox.procs[name].alive(), name
            told = [
                line for line in self.since_fault(name).splitlines() if "schedules:" not in line
            ]
            assert not [line for line in told if OUTAGE_LINE in line], name
        assert wait_until(self.leader, SETTLE_S) is not None

    def again(self) -> None:
        """A job on every node once all three brokers serve again."""
        job = self.pair.start("true")
        done = self.pair.wait_job(job["job_id"], timeout_s=SETTLE_S)
        assert done["summary"] == {"succeeded": 3}, done


@contextlib.contextmanager
def scene(tmp_path: Path, cluster: KafkaCluster) -> Iterator[Scene]:
    log = server_log(cluster)
    kafka = Kafka(log, SESSION_S, silence_factor=SILENCE_FACTOR)
    server = {"leader_session_s": SESSION_S}
    with kafka_pair(tmp_path, kafka, WHITELIST, server) as (pair, _):
        yield Scene(pair, cluster, str(log["topic_prefix"]))


def test_the_broker_leading_commands_killed_mid_job(tmp_path: Path, cluster: KafkaCluster) -> None:
    with scene(tmp_path, cluster) as s:
        victim = s.leader_broker("commands")
        s.begin(job_s=3, schedule_in_s=2.0)
        s.fault()
        cluster.kill(victim)  # SIGKILL
        s.check_once()
        # A killed broker may move the lease too, the group's coordinator or not: CI saw
        # the leader's heartbeat to the coordinator (another broker, busy with the
        # failover on two shared cores) time out after 2 s, and the standby lead. Safely:
        # the job and the fire ran once on every node (check_once), both servers live,
        # one leads after.
        s.live_through()
        cluster.restart(victim)
        s.again()


@pytest.mark.drill  # 15 s: bench/drills.py (the suite: that broker killed)
def test_the_broker_leading_commands_stopped_past_its_session(
    tmp_path: Path, cluster: KafkaCluster
) -> None:
    # The brokers' broker.session.timeout.ms (3 s here): the controller fences the stopped
    # broker after it, moves its partitions' leadership and drops it from their ISR.
    session_s = int(TEST_SETTINGS["broker.session.timeout.ms"]) / 1000
    with scene(tmp_path, cluster) as s:
        victim = s.leader_broker("commands")
        s.begin(job_s=3, schedule_in_s=2.0)
        s.fault()
        cluster.pause(victim)
        try:
            time.sleep(session_s + 2.0)  # held fault, not a wait (noqa: not a wait)
        finally:
            cluster.resume(victim)
        s.check_once()
        # A stopped broker may move the lease, the group's coordinator or not: CI saw the
        # leader stand by with the coordinator elsewhere (its member gave its partition
        # up while the server was held in a write to the stopped broker). Safely: the
        # job and the fire ran once on every node (check_once), both servers live, one
        # leads after.
        s.live_through()
        cluster.wait_serving(60)
        s.again()


@pytest.mark.drill  # 35 s: bench/drills.py runs it (the outage path: test_log_storage.py)
def test_the_whole_cluster_down_14_s_and_back(tmp_path: Path, cluster: KafkaCluster) -> None:
    with scene(tmp_path, cluster) as s:
        s.begin(job_s=3, schedule_in_s=5.0)  # due while the cluster is down
        leader = s.fault()
        for node in cluster.members:
            cluster.kill(node.node_id)
        down_at = time.monotonic()
        try:
            # The leader says so once its first request has waited its timeout (10 s).
            api = s.pair.sandbox.api if leader == "server" else s.pair.standby_api
            wait_until(lambda: (info := info_of(s.pair, api)) and info["log_outage"], OUTAGE_S + 10)
            info = info_of(s.pair, api)
            assert info is not None and not info["leader"], info  # it stands by
            left = OUTAGE_S - (time.monotonic() - down_at)
            time.sleep(max(0.0, left))  # held fault, not a wait (noqa: not a wait)
            for name in s.servers:
                assert s.pair.sandbox.procs[name].alive(), name
        finally:
            for node in cluster.members:
                cluster.restart(node.node_id, wait=False)
        cluster.wait_serving(60)
        s.check_once()
        assert OUTAGE_LINE in s.since_fault(leader)
        wait_until(s.leader, SETTLE_S)
        s.again()


@pytest.mark.drill  # 25 s: bench/drills.py runs it (a killed broker is the suite's)
def test_one_brokers_disk_full_mid_job(
    tmp_path: Path, brokers: Brokers, cluster: KafkaCluster
) -> None:
    if brokers.disk is None:
        pytest.skip(brokers.no_disk)
    with scene(tmp_path, cluster) as s:
        s.begin(job_s=3, schedule_in_s=2.0)
        s.fault()
        filler = fill(brokers.disk)
        node = cluster.node(DISK_NODE)
        s.check_once()
        # The halting broker may coordinate the leader group: then the lease moves (safe,
        # and said in docs/high-availability.md, "When brokers fail"); else the leader
        # carries on. Both servers live through it either way.
        for name in s.servers:
            assert s.pair.sandbox.procs[name].alive(), name
        # Kafka stops a broker whose only log directory fails (it holds the metadata log).
        wait_until(lambda: not node.running(), 30, 0.1)
        assert "No space left on device" in node.log_tail(200_000)
        filler.unlink()
        cluster.restart(DISK_NODE)
        wait_until(s.leader, SETTLE_S)
        s.again()
