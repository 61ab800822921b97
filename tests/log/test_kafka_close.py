"""A Kafka group member leaving its group never freezes the process (``kafka_close``).

The freeze: a member that joined and was not polled again before it was released (a server
taking every partition at start, then handing some back once it sees the others) has an
assignment queued by the time it leaves. librdkafka's close served that assignment while
terminating the group, confluent-kafka then waited for the group's thread holding the GIL,
and the whole process stopped, main thread in ``Thread.start`` or in the bounded join.

The child process does what such a server does, many times, with the time between joining
and leaving spread over 0.02-0.3 s. Before the fix one member in 20 to 35 froze, whatever
that time (measured from 0.02 to 1.4 s after joining), so many short members find it as
surely as a few long ones, in a fraction of the time: this loop froze in each of 7 runs
(24 members of 1.0-1.7 s froze in 2 runs out of 3). A frozen child dumps its stacks to
stderr and exits, so the parent never waits out more than its own timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pushjobs.log.base import TopicPolicy
from tests.log import kafka_support
from tests.support import wait_until

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(
        kafka_support.available() is not None, reason=str(kafka_support.available())
    ),
]

ROOT = Path(__file__).resolve().parents[2]
# Far longer than the handover is given below; the mock heartbeats every sixth of it, and
# a member is assigned at a heartbeat (40 s made that up to 6.7 s, in half the runs).
LONG_SESSION_MS = 12_000
ROUNDS = 8  # the drill's (python bench/drills.py); the suite runs SUITE_ROUNDS
SUITE_ROUNDS = 3
MEMBERS = 8
FIRST_S, STEP_S = 0.02, 0.04  # the n-th member of a round leaves FIRST_S + n * STEP_S after joining
FROZEN_S = 60  # the child dumps its stacks and exits if still running by then

CHILD = """
import faulthandler, json, sys, time
faulthandler.dump_traceback_later({frozen}, exit=True)
from tests.log.kafka_support import open_log_from_spec
spec, topics = json.loads(sys.argv[1]), sys.argv[2:]
log = open_log_from_spec(spec)
for index, topic in enumerate(topics):
    member = log.member(topic + ".owner", topic, "m", session_timeout_s=3.0)
    joined = time.monotonic()
    # Busy with the log, as a server is, while the assignment arrives unpolled.
    while time.monotonic() - joined < {first} + {step} * (index % {members}):
        log.append("probe", "k", b"v")
    member.close()
    print("left", topic, flush=True)
log.close()
print("done", flush=True)
"""


@pytest.mark.parametrize(
    "rounds", [SUITE_ROUNDS, pytest.param(ROUNDS, marks=pytest.mark.drill)], ids=["suite", "drill"]
)
def test_leaving_with_an_unpolled_assignment_never_freezes_the_process(cluster, rounds):
    topics = [f"part.{n}" for n in range(rounds * MEMBERS)]
    for topic in ["probe", *topics]:
        cluster.make_topic(topic)
    code = CHILD.format(frozen=FROZEN_S, first=FIRST_S, step=STEP_S, members=MEMBERS)
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cluster.spec()), *topics],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=FROZEN_S + 30,
    )
    left = [line for line in done.stdout.splitlines() if line.startswith("left ")]
    assert done.returncode == 0 and "done" in done.stdout, (
        f"the child froze after {len(left)} of {len(topics)} members left:\n{done.stderr}"
    )
    assert len(left) == len(topics)


def test_leaving_hands_the_partition_over_at_once(kafka_host):
    # A session far longer than the wait below: b is assigned because a left the group,
    # not because the broker timed a out.
    cluster = kafka_host.new_cluster(LONG_SESSION_MS)
    log = cluster.open_log()
    other = cluster.open_log()
    try:
        log.create_topic("commands", TopicPolicy(compacted=True))
        a = log.member("leaders", "commands", "a", session_timeout_s=LONG_SESSION_MS / 1000)
        epoch_a = wait_until(a.poll, timeout_s=15)
        b = other.member("leaders", "commands", "b", session_timeout_s=LONG_SESSION_MS / 1000)
        wait_until(lambda: a.poll() == epoch_a and b.poll() is None and _joined(b))
        a.close()
        assert a.consumer is None and not a.is_open and a.poll() is None
        assert wait_until(b.poll, timeout_s=LONG_SESSION_MS / 2000) > epoch_a
        b.close()
    finally:
        other.close()
        log.close()
        cluster.close()


def _joined(member):
    return member.consumer.memberid() not in (None, "")
