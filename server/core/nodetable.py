"""The server's table of nodes: what each reported, and whether it is alive. Pure.

Heartbeats arrive already verified (``Inbox``); the table records the node's command
endpoint, facts and current job, feeds the shared liveness tracker and turns what it sees
into events the daemon logs and the job coordinator acts on:

- ``NodeOnline`` / ``NodeOffline`` at the liveness thresholds (``pushjobs.protocol.liveness``);
- ``NodeRestarted`` when a node's incarnation changed: its in-flight job is crashed.

Time is monotonic seconds for liveness, as everywhere inside.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pushjobs.protocol.liveness import LivenessTracker
from server.core.targeting import NodeFacts


@dataclass(frozen=True, slots=True)
class NodeOnline:
    node: str


@dataclass(frozen=True, slots=True)
class NodeOffline:
    node: str
    last_seen: float


@dataclass(frozen=True, slots=True)
class NodeRestarted:
    node: str
    incarnation: str


NodeEvent = NodeOnline | NodeOffline | NodeRestarted


@dataclass(slots=True)
class NodeInfo:
    name: str
    command_endpoint: str = ""
    incarnation: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    job_id: str | None = None
    job_state: str | None = None


class NodeTable:
    def __init__(self, liveness: LivenessTracker) -> None:
        self.liveness = liveness
        self._nodes: dict[str, NodeInfo] = {}

    def register(
        self,
        name: str,
        command_endpoint: str,
        facts: Mapping[str, str],
        tags: Sequence[str],
    ) -> NodeInfo:
        """Record what a node said in config discovery."""
        info = self._nodes.get(name)
        if info is None:
            info = self._nodes[name] = NodeInfo(name)
        info.command_endpoint = command_endpoint
        info.facts = dict(facts)
        info.tags = tuple(tags)
        return info

    def heartbeat(
        self,
        name: str,
        incarnation: str,
        command_endpoint: str,
        job_id: str | None,
        job_state: str | None,
        *,
        restarted: bool,
        now: float,
    ) -> list[NodeEvent]:
        info = self._nodes.get(name)
        if info is None:
            info = self._nodes[name] = NodeInfo(name)
        events: list[NodeEvent] = []
        if restarted or (info.incarnation and info.incarnation != incarnation):
            events.append(NodeRestarted(name, incarnation))
        info.incarnation = incarnation
        info.command_endpoint = command_endpoint
        info.job_id = job_id
        info.job_state = job_state
        if self.liveness.heartbeat(name, now) is not None:
            events.append(NodeOnline(name))
        return events

    def reported(self, name: str, incarnation: str, command_endpoint: str | None) -> NodeInfo:
        """What a node's edge reported of it (with edges, heartbeats stop at the edge)."""
        info = self._nodes.get(name)
        if info is None:
            info = self._nodes[name] = NodeInfo(name)
        info.incarnation = incarnation
        if command_endpoint is not None:
            info.command_endpoint = command_endpoint
        return info

    def busy(self, name: str, job_id: str | None, job_state: str | None) -> None:
        info = self._nodes.get(name)
        if info is not None:
            info.job_id, info.job_state = job_id, job_state

    def expire(self, now: float) -> list[NodeOffline]:
        return [NodeOffline(e.peer, e.last_seen) for e in self.liveness.expire(now)]

    def cut_off(self, name: str, now: float) -> NodeOffline | None:
        """A revoked node is offline at once and forgotten."""
        went = self.liveness.mark_offline(name, now)
        self.liveness.forget(name)
        self._nodes.pop(name, None)
        return None if went is None else NodeOffline(name, went.last_seen)

    def get(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def is_online(self, name: str) -> bool:
        return self.liveness.is_online(name)

    def online_names(self) -> Iterator[str]:
        return self.liveness.online_peers()

    def facts(self) -> list[NodeFacts]:
        return [NodeFacts(n.name, n.facts, n.tags) for n in self._nodes.values()]

    def __iter__(self) -> Iterator[NodeInfo]:
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)
