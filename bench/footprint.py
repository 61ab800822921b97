"""What pushjobs costs a machine while nothing happens: the agent's memory and CPU, and the
server's CPU with a small fleet.

Three sandboxes run side by side on loopback, measured over the same windows so that the
load of other processes on the machine falls on all alike:

- ``fleet``: a ``pushjobs-server`` and ``--agents`` real ``pushjobs-agent`` processes;
- ``alone``: a ``pushjobs-server`` with no agent (the baseline: what its loop costs
  with nobody to hear);
- ``tuned``: a server alone with the test bed's settings (``leader_session_s = 1.5``,
  ``registry_check_s = 0.2``: fast failover for the tests, not what users run).

The servers of ``fleet`` and ``alone`` run with the defaults a user gets (leadership renewed
every ``leader_session_s / 3`` of 5 s, the key registry read every second): the test bed's
own settings make an idle server three to five times busier.

After every agent is online and ``--settle-s`` more seconds, ``--rounds`` windows of
``--window-s`` seconds each are measured from ``/proc/PID/stat`` (user + system CPU time,
so a busy machine slows the processes but barely changes what they spend) and
``/proc/PID/status`` (VmRSS, RssAnon and RssFile; voluntary context switches, which count
the times a process went to sleep: its wake-ups).

Memory baselines in the same run, each a fresh interpreter (``sys.executable``):
``python -c pass``; the agent's imports and nothing else (``import agent.__main__``),
with the heavy packages they pulled in; the idle agent after the windows.

Goals from issue 25: an idle agent <= 30 MiB RSS and < 0.2 % CPU; the server with 10 agents
< 0.6 % CPU.

    python bench/footprint.py [--agents 10] [--rounds 3] [--window-s 30] [--interval-s 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from machine import describe  # bench/ is sys.path[0] when run as a script

from pushjobs.api.client import ApiClient
from pushjobs.testbed.sandbox import Sandbox

TICKS = os.sysconf("SC_CLK_TCK")
# Packages whose presence in an idle agent is worth a line: big, and not all needed.
HEAVY = ["cryptography", "zmq", "sqlite3", "orjson", "ctypes", "tomllib", "json", "argparse"]
IMPORTS_ONLY = f"""
import json, sys
import agent.__main__
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
heavy = {HEAVY!r}
print(json.dumps({{
    "rss": int(status["VmRSS"].split()[0]) / 1024,
    "modules": len(sys.modules),
    "heavy": [h for h in heavy if h in sys.modules],
}}))
"""


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def status(pid: int) -> dict[str, int]:
    """VmRSS/RssAnon/RssFile in KiB, voluntary context switches, threads."""
    wanted = {"VmRSS", "RssAnon", "RssFile", "voluntary_ctxt_switches", "Threads"}
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in wanted:
                out[key] = int(value.split()[0])
    return out


def fresh_rss(code: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    )
    return dict(json.loads(result.stdout))


def wait_online(client: ApiClient, names: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = client.call("node.list", {})["nodes"]
        if sum(1 for r in rows if r["online"] and r["name"] in names) == len(names):
            return
        time.sleep(0.2)
    raise SystemExit(f"not all {len(names)} nodes online after {timeout_s} s")


# The server's own defaults (server.shell.serverconfig), where the test bed tunes them.
DEFAULTS = {"server": {"leader_session_s": 5.0, "registry_check_s": 1.0}}


def start(
    stack: ExitStack, n: int, interval_s: float, *, defaults: bool = True
) -> tuple[Sandbox, list[str]]:
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pushjobs-bench-")))
    names = [f"node-{i:03d}" for i in range(n)]
    extra = DEFAULTS if defaults else {}
    sandbox = Sandbox(root, nodes=names, interval_s=interval_s, server_extra=extra)
    sandbox.prepare()
    stack.callback(sandbox.stop)
    sandbox.start_server(timeout_s=120)
    if names:
        # Generous: agents start all at once, on two cores shared with other work.
        sandbox.start_agents(timeout_s=300)
        client = ApiClient.from_files(
            sandbox.api, root / "keys/server.pub", root / "keys/admin.key", timeout_s=30
        )
        with client:
            wait_online(client, names, 300)
    return sandbox, names


def window(pids: list[int], seconds: float) -> dict[int, tuple[float, float]]:
    """Per pid: (CPU %, wake-ups per second) over ``seconds``."""
    before = {pid: (cpu_s(pid), status(pid)["voluntary_ctxt_switches"]) for pid in pids}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    out = {}
    for pid, (cpu0, sw0) in before.items():
        cpu1, sw1 = cpu_s(pid), status(pid)["voluntary_ctxt_switches"]
        out[pid] = (100 * (cpu1 - cpu0) / elapsed, (sw1 - sw0) / elapsed)
    return out


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores are shared: say the noise)")
    print(
        f"heartbeat interval {args.interval_s} s; {args.agents} agents; "
        f"{args.rounds} windows of {args.window_s:.0f} s\n"
    )

    bare = fresh_rss(
        "import json; s = dict(l.split(':', 1) for l in open('/proc/self/status')); "
        "print(json.dumps({'rss': int(s['VmRSS'].split()[0]) / 1024}))"
    )
    imports = fresh_rss(IMPORTS_ONLY)

    with ExitStack() as stack:
        alone, _ = start(stack, 0, args.interval_s)
        tuned, _ = start(stack, 0, args.interval_s, defaults=False)
        fleet, names = start(stack, args.agents, args.interval_s)
        time.sleep(args.settle_s)
        alone_pid = alone.procs["server"].pid
        tuned_pid = tuned.procs["server"].pid
        server_pid = fleet.procs["server"].pid
        agents = [fleet.procs[name].pid for name in names]
        rounds = []
        for _ in range(args.rounds):
            rounds.append(window([alone_pid, tuned_pid, server_pid, *agents], args.window_s))
        agent_status = [status(pid) for pid in agents]
        server_status = status(server_pid)

    print("== agent memory (MiB)")
    print(f"  python -c pass:                 {bare['rss']:5.1f}")
    print(
        f"  imports only (agent.__main__):  {imports['rss']:5.1f}  "
        f"({imports['modules']} modules; heavy: {', '.join(imports['heavy'])})"
    )
    rss = [s["VmRSS"] / 1024 for s in agent_status]
    anon = [s["RssAnon"] / 1024 for s in agent_status]
    file_ = [s["RssFile"] / 1024 for s in agent_status]
    print(
        f"  idle agent VmRSS:               {med(rss):5.1f}  (max {max(rss):.1f}; "
        f"anon {med(anon):.1f}, file {med(file_):.1f}; "
        f"{agent_status[0]['Threads']} threads)   goal <= 30"
    )

    print("\n== idle CPU % (wake-ups/s), per window")
    for i, r in enumerate(rounds, 1):
        agent_cpu = [r[pid][0] for pid in agents]
        agent_wakes = [r[pid][1] for pid in agents]
        print(
            f"  window {i}: agent median {med(agent_cpu):.3f} % (max {max(agent_cpu):.3f}, "
            f"{med(agent_wakes):.1f}/s) | server, {args.agents} agents {r[server_pid][0]:.2f} % "
            f"({r[server_pid][1]:.0f}/s) | server alone {r[alone_pid][0]:.2f} % "
            f"({r[alone_pid][1]:.0f}/s) | alone, test settings {r[tuned_pid][0]:.2f} % "
            f"({r[tuned_pid][1]:.0f}/s)"
        )
    agent_all = [r[pid][0] for r in rounds for pid in agents]
    server_all = [r[server_pid][0] for r in rounds]
    alone_all = [r[alone_pid][0] for r in rounds]
    tuned_all = [r[tuned_pid][0] for r in rounds]
    print(
        f"  median: agent {med(agent_all):.3f} % (goal < 0.2) | server with {args.agents} "
        f"agents {med(server_all):.2f} % (goal < 0.6), RSS "
        f"{server_status['VmRSS'] / 1024:.1f} MiB | server alone {med(alone_all):.2f} % | "
        f"alone, test settings {med(tuned_all):.2f} %"
    )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
