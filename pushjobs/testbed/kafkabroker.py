"""A real Apache Kafka on loopback for tests and benchmarks: jars fetched once, KRaft nodes
started, faulted and stopped as processes.

Theory of operation. The broker is Kafka's own jars (``kafka_2.13`` at ``KAFKA_VERSION``
and what it needs), fetched by Maven from the pom shipped beside this module
(``kafkajars/pom.xml``) into the user's cache directory, once: ``fetch()`` copies them
into a scratch directory, renames it into place and only then writes the marker that
says the cache is complete, under a file lock, so a fetch killed at any line leaves
either nothing usable (fetched again next time) or a complete cache.

``KafkaCluster`` runs one node, or three, each a JVM started with ``java -cp 'jars/*'
kafka.Kafka server.properties`` after ``kafka.tools.StorageTool format`` (KRaft: every
node is both controller and broker, the controllers a static quorum; no ZooKeeper). Ports
are picked free on 127.0.0.1 and written into the configs; a node whose port was taken in
between fails to bind, and the whole start is tried again on new ports. ``start()``
returns once the cluster's metadata lists every broker. Three nodes get replication
factor 3 and ``min.insync.replicas`` 2, like the cluster docs/high-availability.md
describes.

Every JVM is stopped by PID (``stop``: SIGTERM, SIGKILL after a grace), is told by the
kernel to die with the process that started it (``PR_SET_PDEATHSIG``, so a test run
killed with SIGKILL leaves no broker behind), and can be faulted one node at a time:
``kill`` (SIGKILL), ``pause``/``resume`` (SIGSTOP/SIGCONT), ``restart`` (on its ports and
data). Each node's directory holds its config, its data and ``broker.log``.

Killed at any line: the brokers die with this process (the death signal); their
directories stay behind in the caller's scratch directory, and nothing in the cache is
ever half-written.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from pushjobs.errors import BrokerUnavailable, PushJobsError, SandboxError

KAFKA_VERSION = "4.1.1"
KAFKA_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"
HERE = Path(__file__).with_name("kafkajars")
POM = HERE / "pom.xml"
LOG4J = HERE / "log4j2.properties"
MARKER = "COMPLETE"
# Set (to anything but 0) where a broker must run, in CI: a test that cannot get one fails
# instead of skipping.
REQUIRE_ENV = "PUSHJOBS_REQUIRE_KAFKA"

# A broker for tests: a small heap, the serial collector and the C1 compiler only start a
# node in about 3 s on two cores instead of 5, and leave room for three of them.
JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-UsePerfData",  # no hsperfdata file per JVM in /tmp
    "-Djava.awt.headless=true",
)

# What every node needs to run here, tuned or not: none of it changes what a client sees.
RUN_SETTINGS: dict[str, str] = {
    # The cleaner's 128 MiB default offset map would take half of a 256 MiB heap.
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
}

# What a tuned test broker runs with besides its listeners and replication, and why.
TEST_SETTINGS: dict[str, str] = {
    # An auto-created topic gets one partition, as every topic of the log has.
    "num.partitions": "1",
    # A classic group's first member is assigned at once rather than after 3 s.
    "group.initial.rebalance.delay.ms": "0",
    # Retention checks and the log cleaner start at once (by default 30 s after start-up)
    # and look often, so a test sees them act within seconds.
    "log.initial.task.delay.ms": "0",
    "log.retention.check.interval.ms": "500",
    "log.cleaner.backoff.ms": "200",
    # A node killed with SIGKILL is fenced by the controller after its broker session, and
    # a restarted one may register again only then (9 s by default): 3 s keeps a restart
    # and a partition leader's failover within a test's patience.
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    # Short sessions, as the tests ask for (1-3 s), for both group protocols.
    "group.min.session.timeout.ms": "500",
    "group.consumer.min.session.timeout.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}

START_TIMEOUT_S = 90.0  # three JVMs on two busy cores
STOP_GRACE_S = 10.0
FETCH_TIMEOUT_S = 900.0
BIND_ATTEMPTS = 3
PR_SET_PDEATHSIG = 1


# The jars.


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the jars live: ``$XDG_CACHE_HOME/pushjobs/kafka-VERSION`` (or ``~/.cache``)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "pushjobs" / f"kafka-{KAFKA_VERSION}"


def jars_dir(cache: Path | None = None) -> Path | None:
    """The directory of a complete fetch, or None if there is none (yet)."""
    cache = cache_dir() if cache is None else cache
    jars = cache / "jars"
    if (cache / MARKER).is_file() and (jars / KAFKA_JAR).is_file():
        return jars
    return None


def fetch(
    cache: Path | None = None, *, mvn: str = "mvn", timeout_s: float = FETCH_TIMEOUT_S
) -> Path:
    """The jars, fetched with Maven into ``cache`` unless a complete fetch is there already.

    Two processes fetching at once take turns (a file lock); the second finds the first's
    jars. Raises ``BrokerUnavailable`` when Maven is missing or fails, with its output.
    """
    cache = cache_dir() if cache is None else cache
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = jars_dir(cache)
        if found is not None:
            return found
        if shutil.which(mvn) is None:
            raise BrokerUnavailable(
                f"no {mvn!r} on PATH to fetch the Kafka {KAFKA_VERSION} jars "
                "(apt-get install maven; or put the jars in "
                f"{cache / 'jars'} and create {cache / MARKER})"
            )
        with tempfile.TemporaryDirectory(prefix="fetch-", dir=cache) as scratch:
            work = Path(scratch)
            shutil.copy(POM, work / "pom.xml")  # mvn writes target/ beside its pom
            out = work / "jars"
            argv = [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies"]
            argv.append(f"-DoutputDirectory={out}")
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=timeout_s, check=False
                )
            except subprocess.TimeoutExpired:
                raise BrokerUnavailable(f"{' '.join(argv)}: no result in {timeout_s:g} s") from None
            if done.returncode != 0 or not (out / KAFKA_JAR).is_file():
                raise BrokerUnavailable(
                    f"{' '.join(argv)} failed (exit {done.returncode}):\n"
                    f"{(done.stdout + done.stderr)[-3000:]}"
                )
            target = cache / "jars"
            if target.exists():
                shutil.rmtree(target)  # an incomplete earlier fetch: no marker
            out.rename(target)
        names = sorted(p.name for p in target.iterdir())
        (cache / MARKER).write_text("\n".join(names) + "\n")
        return target


def java() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise BrokerUnavailable("no Java runtime: set JAVA_HOME or install Java 17 or later")
    return found


def unavailable(cache: Path | None = None) -> str | None:
    """Why no broker can start here without fetching anything, or None if one can."""
    try:
        java()
    except BrokerUnavailable as exc:
        return str(exc)
    if jars_dir(cache) is None:
        where = cache_dir() if cache is None else cache
        return (
            f"the Kafka {KAFKA_VERSION} jars are not in {where} "
            "(python -m pushjobs.testbed.kafkabroker fetch)"
        )
    return None


def required(env: Mapping[str, str] | None = None) -> bool:
    """Whether a missing broker is a failure here (``PUSHJOBS_REQUIRE_KAFKA``), not a skip."""
    env = os.environ if env is None else env
    return env.get(REQUIRE_ENV, "") not in ("", "0")


# The nodes.


def cluster_id() -> str:
    """A new KRaft cluster id: 16 random bytes, base64url without padding, never starting
    with ``-`` (as Kafka's own ``Uuid.randomUuid``): the storage tool's ``-t`` took one
    that did (one in 64) for an option, and the whole start failed."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


def free_port() -> int:
    """A port nothing listens on now; a node that cannot bind it is started again elsewhere."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def replication_settings(nodes: int) -> dict[str, str]:
    """Replication of every topic, internal ones included: all nodes, a majority in sync."""
    factor = str(nodes)
    in_sync = str(nodes // 2 + 1)
    return {
        "default.replication.factor": factor,
        "min.insync.replicas": in_sync,
        "offsets.topic.replication.factor": factor,
        # One partition a node, not 50: the first group's coordinator loads in 1 s, not 5.
        "offsets.topic.num.partitions": str(nodes),
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": in_sync,
    }


def properties_text(settings: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# Resolved before any fork: the child calls it and nothing else.
_PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl


@dataclass
class Node:
    """One KRaft node (controller and broker) of a cluster: its ports, directory, process."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise SandboxError(f"kafka node {self.node_id} is not running")
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class KafkaCluster:
    """One or three KRaft nodes on 127.0.0.1 under ``root`` (see the module docstring).

    ``settings`` are extra broker settings for every node. ``tuned`` (the default) puts
    them over ``replication_settings`` and ``TEST_SETTINGS``; untuned, a node has only
    what it needs to run here (its listeners, quorum and directory, ``RUN_SETTINGS``) and
    Kafka's defaults for the rest, as a recipe that sets up brokers by hand expects.
    ``log_dirs`` puts a node's data (its ``log.dirs``, the metadata log included) in a
    directory of the caller's instead of its own ``data``: a small file system of its own,
    to fill up under it. What is in it is removed when the node is laid out.
    """

    root: Path
    nodes: int = 1
    settings: Mapping[str, str] = field(default_factory=dict)
    tuned: bool = True
    jars: Path | None = None
    start_timeout_s: float = START_TIMEOUT_S
    log_dirs: Mapping[int, Path] = field(default_factory=dict)
    host: str = "127.0.0.1"
    """The address clients reach the brokers at (listened on, advertised): another of
    this machine's, for clients in a network namespace of the test's."""
    members: list[Node] = field(default_factory=list, init=False)
    cluster_id: str = field(default_factory=cluster_id, init=False)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise SandboxError("a Kafka cluster needs at least one node")

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{node.port}" for node in self.members)

    def node(self, node_id: int) -> Node:
        for node in self.members:
            if node.node_id == node_id:
                return node
        raise SandboxError(f"no kafka node {node_id} (nodes: {[n.node_id for n in self.members]})")

    def data_dir(self, node: Node) -> Path:
        """Where ``node`` keeps its partitions and its metadata log."""
        return self.log_dirs.get(node.node_id, node.directory / "data")

    # Starting.

    def start(self) -> KafkaCluster:
        """Format and start every node; return once the metadata lists every broker."""
        jars = self.jars or jars_dir()
        if jars is None:
            raise BrokerUnavailable(str(unavailable()))
        self.jars = jars
        for attempt in range(1, BIND_ATTEMPTS + 1):
            self._lay_out()
            try:
                self._format()
                for node in self.members:
                    self._launch(node)
                self.wait_serving()
                return self
            except SandboxError:
                taken = any(_bind_failed(node) for node in self.members)
                self.stop()
                if not taken or attempt == BIND_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _lay_out(self) -> None:
        """Fresh ports and empty directories for every node."""
        self.cluster_id = cluster_id()
        self.members = []
        for node_id in range(1, self.nodes + 1):
            directory = self.root / f"node-{node_id}"
            if directory.exists():
                shutil.rmtree(directory)
            (directory / "data").mkdir(parents=True)
            if node_id in self.log_dirs:
                _empty(self.log_dirs[node_id])
            self.members.append(Node(node_id, free_port(), free_port(), directory))
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.members)
        for node in self.members:
            settings = {
                "process.roles": "broker,controller",
                "node.id": str(node.node_id),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{self.host}:{node.port},"
                f"CONTROLLER://127.0.0.1:{node.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{self.host}:{node.port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(self.data_dir(node)),
                **RUN_SETTINGS,
                **(replication_settings(self.nodes) if self.tuned else {}),
                **(TEST_SETTINGS if self.tuned else {}),
                **self.settings,
            }
            node.config_path.write_text(properties_text(settings))

    def _java(self, main: str, *args: str) -> list[str]:
        assert self.jars is not None
        return [
            java(),
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={LOG4J}",
            "-cp",
            f"{self.jars}/*",
            main,
            *args,
        ]

    def _format(self) -> None:
        """``StorageTool format`` on every node at once (a JVM start each)."""
        running = []
        for node in self.members:
            argv = self._java(
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={self.cluster_id}",
                "-c",
                str(node.config_path),
            )
            with (node.directory / "format.log").open("wb") as out:
                running.append((node, _popen(argv, out)))
        for node, proc in running:
            try:
                code = proc.wait(timeout=self.start_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = -1
            if code != 0:
                text = (node.directory / "format.log").read_text(errors="replace")
                raise SandboxError(f"formatting kafka node {node.node_id} failed ({code}):\n{text}")

    def _launch(self, node: Node) -> None:
        argv = self._java("kafka.Kafka", str(node.config_path))
        with node.log_path.open("ab") as out:
            node.proc = _popen(argv, out)

    def wait_serving(self, timeout_s: float | None = None) -> None:
        """Wait until every running node answers a metadata request itself, listing every
        running node as a broker.

        Asked of each node on its own listener: another node still lists a killed one
        until the controller expires its broker session, so its word proves nothing.
        """
        timeout_s = self.start_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        waiting = {n.node_id: "no answer yet" for n in self.members if n.running()}
        while True:
            for node in self.members:
                if node.proc is not None and node.proc.poll() is not None:
                    raise SandboxError(
                        f"kafka node {node.node_id} exited ({node.proc.returncode}); "
                        f"{node.log_path}:\n{node.log_tail()}"
                    )
            for node_id in list(waiting):
                problem = _serving(
                    self.node(node_id), set(waiting) | self._running_ids(), self.host
                )
                if problem is None:
                    del waiting[node_id]
                else:
                    waiting[node_id] = problem
            if not waiting:
                return
            if time.monotonic() >= deadline:
                tails = "\n".join(f"node {n.node_id}:\n{n.log_tail(1500)}" for n in self.members)
                raise SandboxError(
                    f"kafka at {self.bootstrap} not serving within {timeout_s:g} s "
                    f"({waiting}):\n{tails}"
                )
            time.sleep(0.1)  # polling a starting JVM, bounded by the deadline

    def _running_ids(self) -> set[int]:
        return {n.node_id for n in self.members if n.running()}

    # Faults, one node at a time.

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the node; for a signal that ends it, wait until it has."""
        node = self.node(node_id)
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM) and node.proc is not None:
            _wait_or_kill(node.proc, STOP_GRACE_S)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node holds its sockets and answers nothing."""
        os.kill(self.node(node_id).pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self.node(node_id).pid, signal.SIGCONT)

    def restart(self, node_id: int, *, wait: bool = True) -> None:
        """Start a stopped or killed node again on its ports and data (killing it first)."""
        node = self.node(node_id)
        if node.running():
            self.kill(node_id)
        self._launch(node)
        if wait:
            self.wait_serving()

    # Stopping.

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM every running node (SIGCONT first, if paused), SIGKILL what is left at
        the end of ``grace_s``; wait for each."""
        running = [n.proc for n in self.members if n.proc is not None and n.proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in running:
            _wait_or_kill(proc, max(0.0, deadline - time.monotonic()))


def _empty(directory: Path) -> None:
    """Remove what ``directory`` holds, keeping it (it may be a mount point)."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _popen(argv: Sequence[str], out: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, resolved before the fork
    )


def _wait_or_kill(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


def _bind_failed(node: Node) -> bool:
    return "Address already in use" in node.log_tail(20000)


def _serving(node: Node, brokers: set[int], host: str = "127.0.0.1") -> str | None:
    """None if ``node`` answers metadata on its own listener listing ``brokers``, else why not.

    A new client each time: one that knows other brokers may ask them instead.
    """
    from pushjobs.log.kafka.kafka_client import RDKAFKA_LOGGER, load

    try:  # a refused connection answers at once; a metadata client would wait its timeout
        socket.create_connection((host, node.port), timeout=1.0).close()
    except OSError as exc:
        return f"port {node.port}: {exc}"
    _, admin = load()
    client = admin.AdminClient(
        {"bootstrap.servers": f"{host}:{node.port}", "logger": RDKAFKA_LOGGER}
    )
    try:
        listed = set(client.list_topics(timeout=1.0).brokers)
    except Exception as exc:  # not up yet: asked again until the deadline
        return str(exc)
    missing = brokers - listed
    return f"brokers {sorted(missing)} not listed" if missing else None


# The command line.


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pushjobs.testbed.kafkabroker",
        description=f"A real Apache Kafka {KAFKA_VERSION} for the tests and benchmarks.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="fetch the jars into the cache once (needs Maven)")
    commands.add_parser("where", help="print the jars' directory, or why there is none")
    run = commands.add_parser("run", help="run a cluster on loopback until Ctrl-C")
    run.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    run.add_argument("--dir", type=Path, help="keep its files here (default: a scratch dir)")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch())
        elif args.command == "where":
            found = jars_dir()
            print(found if found is not None else unavailable(), file=sys.stdout)
            return 0 if found is not None else 1
        else:
            _run(args.nodes, args.dir)
    except PushJobsError as exc:
        print(f"kafkabroker: {exc}", file=sys.stderr)
        return 1
    return 0


def _run(nodes: int, directory: Path | None) -> None:
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kafka-")))
        directory.mkdir(parents=True, exist_ok=True)
        cluster = stack.enter_context(KafkaCluster(directory, nodes=nodes))
        print(f"kafka {KAFKA_VERSION} serving: bootstrap {cluster.bootstrap}", flush=True)
        for node in cluster.members:
            print(f"  node {node.node_id}: pid {node.pid}, log {node.log_path}", flush=True)
        # Blocked only now: the JVMs must not inherit a mask without these two.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})


if __name__ == "__main__":
    sys.exit(main())
