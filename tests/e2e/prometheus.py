"""A real Prometheus for the tests (Debian's ``prometheus``, which ``.ci/run`` installs):
it scrapes a metrics file an HTTP server of the test serves, and evaluates one alert rule
on it every second, so a test makes the alert fire by writing the file.

Both are subprocesses on free loopback ports, stopped by PID.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import TracebackType

from tests.support import wait_until

BINARY = shutil.which("prometheus") or "/usr/bin/prometheus"


def available() -> bool:
    return Path(BINARY).exists()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """``with Prometheus(root, "DeployErrors", "app_errors > 0") as prom:``; ``prom.url``;
    ``prom.set_metric("app_errors", 1)`` and the alert fires within a few seconds."""

    def __init__(self, root: Path, alert: str, expr: str) -> None:
        self.root = root
        self.alert = alert
        self.expr = expr
        self.port = free_port()
        self.metrics_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Prometheus:
        site = self.root / "site"
        site.mkdir(parents=True, exist_ok=True)
        self.set_metric("app_errors", 0)
        (self.root / "rules.yml").write_text(
            "groups:\n- name: test\n  interval: 1s\n  rules:\n"
            f"  - alert: {self.alert}\n    expr: {self.expr}\n    for: 0s\n"
            "    labels:\n      severity: page\n"
        )
        (self.root / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: ['{self.root / 'rules.yml'}']\n"
            "scrape_configs:\n- job_name: app\n  static_configs:\n"
            f"  - targets: ['127.0.0.1:{self.metrics_port}']\n"
        )
        log = (self.root / "prometheus.log").open("wb")
        try:
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "http.server",
                        str(self.metrics_port),
                        "--bind",
                        "127.0.0.1",
                    ],
                    cwd=site,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            self.procs.append(
                subprocess.Popen(
                    [
                        BINARY,
                        f"--config.file={self.root / 'prometheus.yml'}",
                        f"--storage.tsdb.path={self.root / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            wait_until(self._ready, 30.0, 0.1)
        except BaseException:
            self.stop()
            raise
        finally:
            log.close()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
        self.procs.clear()

    def set_metric(self, name: str, value: float) -> None:
        path = self.root / "site" / "metrics"
        temp = path.with_suffix(".tmp")
        temp.write_text(f"# TYPE {name} gauge\n{name} {value}\n")
        temp.replace(path)

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as reply:
                return bytes(reply.read())
        except OSError:
            return None

    def _ready(self) -> bool:
        if any(proc.poll() is not None for proc in self.procs):
            raise RuntimeError(f"prometheus exited: {(self.root / 'prometheus.log').read_text()}")
        return self._get("/-/ready") is not None

    def firing(self) -> bool:
        body = self._get("/api/v1/alerts")
        if body is None:
            return False
        alerts = json.loads(body)["data"]["alerts"]
        return any(
            a["labels"].get("alertname") == self.alert and a["state"] == "firing" for a in alerts
        )
