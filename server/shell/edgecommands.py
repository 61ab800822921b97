"""Commands through the edges: one instruction per job, kind and edge, fanned out there.

The coordinator's ``Send`` effects are per node, as on the one-process server; here they
are gathered during a flush by (edge, kind, job) and leave at its end as one ``send``
instruction each (``server.core.edgewire``): the edge seals every node's command with that
node's session key. The stamps that keep re-sends apart (``CommandSender``) stay here, in
the leader, which decides what is sent again.

A commit is built here once per job and checked against the channel's frame limit before
any edge gets it, so a commit too large for the command channel is refused as on the
one-process server (``take_undeliverable``), never half sent.

Killed at any line: instructions not yet read by an edge are lost with it; the re-sends
that heartbeats trigger (``Coordinator.unreported``) recover them.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import orjson

from pushjobs.errors import PushJobsError
from pushjobs.protocol import codec
from pushjobs.protocol.framing import seal
from pushjobs.protocol.messages import Abort
from server.core import edgewire
from server.core.effects import Send
from server.core.job import Job
from server.shell.commands import CommandSender
from server.shell.edges import EdgePool

log = logging.getLogger("pushjobs.server")


class EdgeCommandSender(CommandSender):
    pool: EdgePool

    def attach(self, pool: EdgePool) -> None:
        self.pool = pool
        self._batches: defaultdict[tuple[str, str, str], list[str]] = defaultdict(list)
        # job -> its commit encoded, this flush; None: its secrets do not open (counted);
        # an exception: it cannot be sent at all.
        self._templates: dict[str, bytes | Exception | None] = {}

    def send(self, send: Send, job: Job | None, now_ms: int) -> None:
        edge = self.pool.edge_of(send.node)
        if (send.kind != "abort" and job is None) or edge is None:
            self.counters["unsendable"] += 1
            return
        stamps = self.aborted if send.kind == "abort" else self.asked
        key = (send.job_id, send.node)
        stamps.pop(key, None)
        stamps[key] = now_ms
        if send.kind == "commit":
            assert job is not None
            if send.job_id not in self._templates:
                self._templates[send.job_id] = self._template(send, job, now_ms)
            template = self._templates[send.job_id]
            if isinstance(template, Exception):
                self._unsealable(send, template)
                return
            if template is None:
                return
        self._batches[(edge, send.kind, send.job_id)].append(send.node)

    def _template(self, send: Send, job: Job, now_ms: int) -> bytes | Exception | None:
        """The job's commit, encoded once (see ``_templates``)."""
        try:
            message = self._message(send, job, now_ms)
            if message is None:
                return None
            seal(message, self.outbox.signer, self.limits)  # the frame limit, as an edge meets it
            return codec.encode(message)
        except (PushJobsError, ValueError, TypeError, OverflowError) as exc:
            return exc

    def flush(self, now_ms: int) -> None:
        for (edge, kind, job_id), nodes in self._batches.items():
            head = orjson.dumps({"kind": kind, "job": job_id, "nodes": nodes})
            frames = [edgewire.SEND, head]
            template = self._templates.get(job_id) if kind == "commit" else None
            if isinstance(template, bytes):
                frames.append(template)
            if not self.pool.send(edge, frames):
                self.counters["unsendable"] += len(nodes)
        self._batches.clear()
        self._templates.clear()

    def ping(self, node: str, endpoint: str, curve: str, now_ms: int) -> None:
        """Nodes' edges tell them to rediscover themselves (``server.edge``)."""

    def abort_now(self, node: str, job_id: str, endpoint: str, curve: str, now_ms: int) -> None:
        edge = self.pool.edge_of(node)
        if edge is not None:
            self.pool.send(edge, edgewire.encode(edgewire.REVOKE, [[node, [job_id]]]))
        else:
            frames = self.outbox.frames(Abort, now_ms, node=node, job_id=job_id)
            self.channels.send_command(endpoint, curve, frames)
