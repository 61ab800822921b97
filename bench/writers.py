"""One writer's key in the wrong hands: what it makes the server hold and write.

A real server (SQLite log) and one real agent; a writer key added by the admin floods, as
fast as one client can:

    starts      N ``job.start`` requests, each with a 60 KB env
    schedules   S every-second schedules, each with a 60 KB env, left firing for T s

Each runs twice in the same run: with the per-key bounds out of the way (the baseline: a
server as it was before them) and with the shipped defaults (``[jobs]``
``max_active_jobs_per_caller``, ``job_starts_per_minute_per_caller``,
``job_start_burst_per_caller``, ``schedule_fires_per_minute_per_caller``). Prints the
requests accepted and refused, the jobs started, the server's RSS growth and the log
file's growth.

    python bench/writers.py [--starts 1000] [--schedules 100] [--seconds 15]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from machine import describe  # bench/ is sys.path[0] when run as a script

from keys import files
from keys.identity import generate
from pushjobs.api.client import ApiClient
from pushjobs.cli.keyadmin import RemoteKeys
from pushjobs.errors import ApiError
from pushjobs.testbed.sandbox import Sandbox

ENV = {"X": "a" * 60_000}
UNBOUNDED = {
    "max_active_jobs_per_caller": 1_000_000,
    "job_starts_per_minute_per_caller": 1e9,
    "job_start_burst_per_caller": 1_000_000,
    "schedule_fires_per_minute_per_caller": 1e9,
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def log_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.glob("log.db*")) / 1e6


def writer_client(box: Sandbox, admin: ApiClient) -> ApiClient:
    identity = generate("mallory", "user")
    files.save(identity, box.keys_dir, force=True)
    RemoteKeys(admin).add(identity.public, "writer", accept=True)
    return ApiClient.from_files(
        box.api, box.keys_dir / "server.pub", box.keys_dir / "mallory.key", timeout_s=30.0
    )


def flood(kind: str, bounds: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pushjobs-writers-") as tmp:
        box = Sandbox(Path(tmp) / "fleet", nodes=["node-1"], server_extra={"jobs": bounds})
        box.prepare()
        try:
            box.start_server()
            box.start_agents()
            admin = ApiClient.from_files(
                box.api, box.keys_dir / "server.pub", box.keys_dir / "admin.key"
            )
            client = writer_client(box, admin)
            pid = box.procs["server"].popen.pid
            jobs_before = admin.call("server.info")["jobs"]
            rss0, log0 = rss_mb(pid), log_mb(box.root)
            refused: Counter[str] = Counter()
            accepted = 0
            started = time.monotonic()
            count = args.starts if kind == "starts" else args.schedules
            for _ in range(count):
                params: dict[str, Any] = {"command": "true", "nodes": ["node-1"], "env": ENV}
                method = "job.start"
                if kind == "schedules":
                    method, params["cron"] = "schedule.add", "* * * * * *"
                try:
                    client.call(method, params)
                    accepted += 1
                except ApiError as exc:
                    refused[exc.code] += 1
            if kind == "schedules":
                time.sleep(args.seconds)  # the schedules fire on their own meanwhile
            took = time.monotonic() - started
            info = admin.call("server.info")
            result = {
                "accepted": accepted,
                "refused": dict(refused),
                "seconds": took,
                "jobs": sum(info["jobs"].values()) - sum(jobs_before.values()),
                "rss": rss_mb(pid) - rss0,
                "log": log_mb(box.root) - log0,
            }
            client.close()
            admin.close()
            return result
        finally:
            box.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=1000)
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    print(describe())
    print(
        f"{'flood':<10} {'bounds':<9} {'accepted':>8} {'refused':>8} {'jobs':>6} "
        f"{'seconds':>7} {'RSS MB':>7} {'log MB':>7}"
    )
    for kind in ("starts", "schedules"):
        for label, bounds in (("none", UNBOUNDED), ("defaults", {})):
            r = flood(kind, bounds, args)
            print(
                f"{kind:<10} {label:<9} {r['accepted']:>8} {sum(r['refused'].values()):>8} "
                f"{r['jobs']:>6} {r['seconds']:>7.1f} {r['rss']:>+7.1f} {r['log']:>+7.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
