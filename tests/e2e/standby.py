"""Two servers on one installation for the end-to-end tests: the sandbox's own server
(``server``), and a second process (``server-b``) on the same log, keys and registry with
ports of its own, which stands by while the first leads.

The second server's config is the first one's with its binds on ``tcp://127.0.0.1:*``;
once it has bound, the ports it got are pinned in its file, so a restart comes back there.
Its process is one of the sandbox's (``procs["server-b"]``): ``Sandbox.stop`` ends it by
PID with the rest.

On a real Kafka broker, the servers' ``[log]`` is ``tests.kafka_broker.server_log``. On
the mock (``kafka_log``), the log is a librdkafka mock cluster hosted by a process of its
own (``tests/log/mock_cluster.py``), started and stopped by PID by the test: it must
outlive either server, as a real cluster would, and the test takes its brokers down and
up through it. Its topics are created single-partition before any server starts (the
mock would auto-create four, and the leader group would spread them over both servers).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from pushjobs.log.topics import names
from pushjobs.testbed.childproc import Proc, await_ready, spawn
from pushjobs.testbed.sandbox import ANY_PORT, Sandbox, ready_fields
from pushjobs.testbed.tomlwrite import toml_text
from tests.log.kafka_support import MockCluster

SECOND = "server-b"
# The standard topics and the Kafka backend's own (fence and topic registry).
KAFKA_TOPICS = (*names().all(), "__pushjobs-fence", "__pushjobs-topics")


def kafka_log(cluster: MockCluster) -> dict[str, object]:
    """The ``[log]`` table of a server on ``cluster``, whose topics it creates first."""
    for topic in KAFKA_TOPICS:
        cluster.make_topic(topic)
    return {"backend": "kafka", "bootstrap_servers": cluster.bootstrap}


def second_config(sandbox: Sandbox) -> Path:
    return sandbox.root / f"{SECOND}.toml"


def start_second_server(sandbox: Sandbox, *, timeout_s: float = 20.0) -> Proc:
    """Start (or restart) ``server-b`` and wait for its ready line."""
    path = second_config(sandbox)
    if not path.exists():
        config = tomllib.loads(sandbox.server_config_path.read_text())
        binds = ("api_bind", "heartbeat_bind", "reply_bind")
        config["server"].update(dict.fromkeys(binds, ANY_PORT))
        path.write_text(toml_text(config))
    argv = [sys.executable, "-m", "server", "--config", str(path)]
    old = sandbox.procs.get(SECOND)
    if old is not None and old.popen.stdout is not None:
        old.popen.stdout.close()
    proc = spawn(
        SECOND, argv, sandbox.root / "logs" / f"{SECOND}.log", env=sandbox.env(), cwd=sandbox.root
    )
    sandbox.procs[SECOND] = proc
    await_ready(proc, "pushjobs-server", timeout_s)
    ready = ready_fields(proc.ready_line)
    config = tomllib.loads(path.read_text())
    config["server"].update(
        api_bind=ready["api"], heartbeat_bind=ready["heartbeat"], reply_bind=ready["reply"]
    )
    path.write_text(toml_text(config))
    return proc


def api_of(proc: Proc) -> str:
    return ready_fields(proc.ready_line)["api"]
