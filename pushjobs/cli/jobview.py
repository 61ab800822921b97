"""How the CLI shows a job: exit codes, the progress line, the per-node table. Pure.

What the server sends back (states, node names, reasons) is shown through
``render.printable``: a control character in it is written out, never sent raw."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.render import printable, table

TERMINAL = frozenset(
    {"complete", "quorum_failed", "timed_out", "aborted", "crashed", "halted", "rejected"}
)


def exit_code_for(job: Mapping[str, Any]) -> Exit:
    """0 only if every targeted node succeeded; else what went wrong, most specific first.

    A batch job ``halted`` at its failure budget exits 1 (``failed``): it ran, and part of
    it failed."""
    state = job["state"]
    if state == "quorum_failed":
        return Exit.QUORUM_FAILED
    if state == "timed_out":
        return Exit.TIMED_OUT
    if state == "aborted":
        return Exit.ABORTED
    if state == "rejected":
        return Exit.REJECTED
    if state == "awaiting_approval":
        return Exit.AWAITING_APPROVAL
    if state not in TERMINAL:
        return Exit.ERROR
    nodes = job.get("nodes") or {}
    if nodes and all(n["state"] == "succeeded" for n in nodes.values()):
        return Exit.OK
    return Exit.FAILED


def summary_text(job: Mapping[str, Any]) -> str:
    return printable(
        ", ".join(f"{count} {state}" for state, count in sorted(job["summary"].items()))
    )


def headline(job: Mapping[str, Any]) -> str:
    """'job 1a2b3c complete: 2 succeeded', the last line of a job shown."""
    return (
        f"{_name(job)}: {summary_text(job)}{busy_text(job)}{offline_text(job)}"
        f"{approval_text(job)}{halt_text(job)}"
    )


def halt_text(job: Mapping[str, Any]) -> str:
    """Why a batch job stopped starting nodes: '; halted: REASON' (its failure budget, or
    its health signal: ``--halt-if``), '; halting: REASON' while its last nodes finish."""
    reason = job.get("halt_reason")  # a server before --halt-if sends none
    if not reason:
        return ""
    verb = "halted" if job["state"] == "halted" else "halting"
    return printable(f"; {verb}: {reason}")


def approval_text(job: Mapping[str, Any]) -> str:
    """A job the server's policy held: '; awaiting approval until 12:00:05: RULE', or
    how it was decided ('; approved by alice'); '' for a job never held."""
    approval = job.get("approval")  # a server before approvals sends none
    if not approval:
        return ""
    if job["state"] == "awaiting_approval":
        until = local_time(int(approval["expires_ms"]))[11:]
        return printable(f"; awaiting approval until {until}: {approval['rule']}")
    decision, by = approval.get("decision"), approval.get("decided_by")
    reason = f": {approval['reason']}" if approval.get("reason") else ""
    if decision == "expired":
        return printable(f"; approval expired ({approval['rule']})")
    if decision in ("approved", "rejected"):
        return printable(f"; {decision} by {by}{reason}")
    return ""


def busy_text(job: Mapping[str, Any]) -> str:
    """A job waiting for busy nodes (``--busy-wait``): '; waiting for busy nodes until
    12:00:05' (else '')."""
    until = job.get("gate_until_ms")  # a server before --busy-wait sends none
    if until is None or job["state"] != "voting":
        return ""
    return f"; waiting for busy nodes until {local_time(int(until))[11:]}"


def offline_text(job: Mapping[str, Any]) -> str:
    """A job waiting for nodes offline at start (``--offline-wait``): '; offline nodes
    waited for until 2026-11-28 18:00:00' (else ''). How many: the summary says."""
    offline = job["summary"].get("offline", 0)
    until = job.get("offline_until_ms")  # a server before --offline-wait sends none
    if not offline or until is None:
        return ""
    return f"; offline nodes waited for until {local_time(int(until))}"


def _name(job: Mapping[str, Any]) -> str:
    return printable(f"job {job['job_id']} {job['state']}")


def batch_text(job: Mapping[str, Any]) -> str:
    """A batch job's window: '; batch of 3, 1 of 2 failures allowed' (else '')."""
    batch = job.get("batch")
    if not batch:
        return ""
    text = f"; batch of {batch['window']}"
    if batch["wait_s"]:
        text += f" every {batch['wait_s']:g}s"
    if batch["max_failures"] is not None:
        text += f", {batch['failures']} of {batch['max_failures']} failures allowed"
    if held := batch.get("held"):  # a server before held slots sends none
        text += f", {len(held)} held by silent nodes"
    return printable(text)


def progress_line(job: Mapping[str, Any], elapsed_s: float) -> str:
    return (
        f"{_name(job)} {elapsed_s:5.1f}s: {summary_text(job)}{batch_text(job)}"
        f"{busy_text(job)}{offline_text(job)}{approval_text(job)}{halt_text(job)}"
    )


def node_table(job: Mapping[str, Any]) -> str:
    # A batch job's waiting nodes say their place in line (the server keeps target order).
    waiting = [name for name, n in job["nodes"].items() if n["state"] == "waiting"]
    place = {name: f"waiting its turn: {i} of {len(waiting)}" for i, name in enumerate(waiting, 1)}
    # Lost while in flight: its command may still run, so its slot stays taken.
    held = set((job.get("batch") or {}).get("held") or ())
    rows = [
        {
            "node": name,
            "state": n["state"],
            "exit": n["exit_status"],
            "reason": with_output_hint(
                job["job_id"],
                name,
                n["state"],
                (n["reason"] or place.get(name, ""))
                + ("; slot held until it is heard or its timeout" if name in held else "")
                + left_running_text(n),
            ),
        }
        for name, n in sorted(job["nodes"].items())
    ]
    return table(rows, ("node", "state", "exit", "reason"))


def left_running_text(row: Mapping[str, Any]) -> str:
    """What the node's agent could not kill of the job (a server before issue 27 sends none)."""
    left = row.get("left_running") or ()
    if not left:
        return ""
    return f"; {len(left)} process(es) of the job could not be killed: " + "; ".join(left)


OUTPUT_KEPT = frozenset({"failed"})
"""Node states whose output the server keeps even without --capture."""


def with_output_hint(job_id: str, node: str, state: str, reason: str) -> str:
    """A failed node's reason, ending with the command that shows what it printed."""
    if state not in OUTPUT_KEPT:
        return reason
    hint = f"output: pushjobs job output {job_id} {node} --channel stderr"
    return f"{reason}; {hint}" if reason else hint


def local_time(ms: int) -> str:
    """``ms`` since the epoch as this machine's local time. Pure."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    except OSError:
        # Past this platform's time_t: a reply's figure, told as the ValueError a wrongly
        # shaped reply raises (``reading_reply``), not as an I/O error.
        raise ValueError(f"a time out of range: {ms} ms") from None
