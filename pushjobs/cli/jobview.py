"""How the CLI shows a job: exit codes, the progress line, the per-node table. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import table

TERMINAL = frozenset({"complete", "quorum_failed", "timed_out", "aborted", "crashed"})


def exit_code_for(job: Mapping[str, Any]) -> Exit:
    """0 only if every targeted node succeeded; else what went wrong, most specific first."""
    state = job["state"]
    if state == "quorum_failed":
        return Exit.QUORUM_FAILED
    if state == "timed_out":
        return Exit.TIMED_OUT
    if state == "aborted":
        return Exit.ABORTED
    if state not in TERMINAL:
        return Exit.ERROR
    nodes = job.get("nodes") or {}
    if nodes and all(n["state"] == "succeeded" for n in nodes.values()):
        return Exit.OK
    return Exit.FAILED


def summary_text(job: Mapping[str, Any]) -> str:
    return ", ".join(f"{count} {state}" for state, count in sorted(job["summary"].items()))


def progress_line(job: Mapping[str, Any], elapsed_s: float) -> str:
    return f"job {job['job_id']} {job['state']} {elapsed_s:5.1f}s: {summary_text(job)}"


def node_table(job: Mapping[str, Any]) -> str:
    rows = [
        {"node": name, "state": n["state"], "exit": n["exit_status"], "reason": n["reason"]}
        for name, n in sorted(job["nodes"].items())
    ]
    return table(rows, ("node", "state", "exit", "reason"))
