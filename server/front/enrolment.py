"""Discovery and enrolment: who may be a node of this server, and what it is told when it asks.

Theory of operation. An agent starts with a config request on the API socket, signed
with its Ed25519 key. The registry decides (``KeyRegistry.present``): a new key is
``pending`` until an admin accepts it (or accepted at once with ``auto_accept``), a known
key is what its entry says, another key under a registered name is ``denied``. Only an
accepted node gets a ``NodeConfig``: where to send heartbeats and replies, the thresholds,
and a fresh HMAC session key (``sessions.py``) with which it signs from then on and the
server signs its commands. Its command endpoint and CurveZMQ key are remembered here for
the command sockets.

One agent per node. A config request from a second agent presenting a live node's key
(another incarnation at another command endpoint, while the first has not missed a
heartbeat) is denied, and logged naming both; ``node status`` shows it for a minute. An
agent that restarts on the same endpoint is the same agent; one that restarts on a new
port is admitted as soon as its old self has missed a heartbeat.

A standby serves no node: it answers every config request
``not_leader``, naming the leader's API endpoint when the control topic knows it
(``membership.py``), and admits nobody: the agent asks the leader instead.

A node heard under a session key that has retired (revoked, or rotated past its grace)
is told to rediscover (``stale_contacts``, at most once per ``STALE_PING_S``): that is how
an agent whose key was rejected and accepted again comes back within seconds.

Revocation runs on the registry's own cadence: when the registry changed, every
node holding a session whose key is no longer accepted loses its session at once; the
daemon aborts what it was running and node intake takes it offline.

Killed at any line: the registry is written by ``KeyRegistry`` (one atomic write: a
locked file, or one append to the log);
sessions die with the process, and every agent rediscovers the next server.
"""

from __future__ import annotations

import logging
from base64 import b64decode
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from keys.entry import Entry
from keys.identity import PrivateIdentity, PublicIdentity, b64
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import KeyFileError
from pushjobs.protocol.messages import ConfigReply, ConfigRequest, NodeConfig
from pushjobs.protocol.outbox import Outbox
from server.core.edgewire import Served
from server.core.nodetable import NodeInfo, NodeTable
from server.front.admission import Admission, Refused
from server.front.sessions import SessionKey, SessionKeys
from server.shell.channels import Channels
from server.shell.edges import EdgePool
from server.shell.membership import Membership
from server.shell.serverconfig import ServerConfig

log = logging.getLogger("pushjobs.server")

Reply = Callable[[bytes, list[bytes]], None]

STALE_PING_S = 2.0  # a node under a retired key is told again at most this often
DUPLICATE_SHOWN_S = 60.0  # how long node status names a refused second agent
LIVE_SILENCE = 1.5  # intervals: an agent silent longer has (most likely) died


@dataclass(frozen=True, slots=True)
class Contact:
    """Where a node's agent was last admitted: its command endpoint and CurveZMQ key."""

    endpoint: str
    curve: str


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A second agent that presented a node's key while the first was online."""

    endpoint: str
    incarnation: str
    at: float  # monotonic


class Enrolment:
    def __init__(
        self,
        config: ServerConfig,
        identity: PrivateIdentity,
        *,
        registry: KeyRegistry,
        sessions: SessionKeys,
        nodes: NodeTable,
        channels: Channels,
        outbox: Outbox,
        server_incarnation: str,
        heartbeat_endpoint: str,
        reply_endpoint: str,
        membership: Membership | None = None,
        edges: EdgePool | None = None,
    ) -> None:
        self.config = config
        self.edges = edges
        self.membership = membership
        self.identity = identity
        self.registry = registry
        self.sessions = sessions
        self.nodes = nodes
        self.channels = channels
        self.outbox = outbox
        self.server_incarnation = server_incarnation
        self.heartbeat_endpoint = heartbeat_endpoint
        self.reply_endpoint = reply_endpoint
        self.checked_entries: tuple[Entry, ...] | None = None
        self.contacts: dict[str, Contact] = {}  # kept after revocation: to tell the node
        self.pinged: dict[str, float] = {}
        self.duplicates: dict[str, Duplicate] = {}
        section = config.server
        self.admission = Admission(
            registry,
            auto_accept=section.auto_accept,
            max_pending=section.max_pending_keys,
            max_per_source=section.max_pending_per_source,
        )

    def curve_of(self, node: str) -> str | None:
        """The node's CurveZMQ key while it has a session (commands go out in it)."""
        contact = self.contacts.get(node)
        return contact.curve if contact is not None and self.sessions.has(node) else None

    # --- nodes an edge brings -------------------------------------------------------------

    def adopt(self, edge: str, served: list[Served], now: float) -> Adopted:
        """Nodes ``edge`` serves already (it served the leader before this one): taken as
        it says, as if they had asked this server (their sessions, what they said at
        discovery, their contact), so they need not ask again. Each must still hold an
        accepted key (the one it was admitted with: else it must ask, and be told) and
        not have been placed on another edge since (else the edge forgets it)."""
        assert self.edges is not None
        adopted = Adopted()
        for s in served:
            if not _adoptable(self.registry, s):
                adopted.ask_again.append(s.node)
                continue
            if not self.edges.adopt(s.node, edge):
                adopted.elsewhere.append(s.node)
                continue
            for key_id in s.key_ids:
                # Ids only: with edges this server holds no session secret (its edges do).
                self.sessions.install(SessionKey(key_id, s.node, b""), now)
            self.nodes.register(s.node, s.endpoint, s.facts, s.tags)
            self.contacts[s.node] = Contact(s.endpoint, s.curve)
            adopted.taken += 1
            if s.online:
                adopted.online.append((s.node, s.incarnation, s.endpoint))
        if served:
            log.info(
                "edge %s: %d nodes taken as it serves them; %d to ask again, %d elsewhere",
                edge,
                adopted.taken,
                len(adopted.ask_again),
                len(adopted.elsewhere),
            )
        return adopted

    # --- discovery ------------------------------------------------------------------------

    def config_request(
        self,
        identity: bytes,
        req: ConfigRequest,
        now: float,
        now_ms: int,
        reply: Reply,
        *,
        source: str = "",
    ) -> None:
        """Answer a node's config request; ``source`` is its network address (for caps)."""
        if self.membership is not None and not self.membership.leadership.leader:
            self._not_leader(identity, req.sender, now_ms, reply)
            return
        status: str
        try:
            entry = self.registry.find(req.sender)
            if entry is not None and entry.kind != "node":
                raise KeyFileError(f"{req.sender} is registered as a {entry.kind}, not a node")
            public = PublicIdentity(
                req.sender, "node", b64decode(req.ed25519_public), req.curve_public
            )
            decided = self.admission.decide(public, source, now)
            if isinstance(decided, Refused):
                self._reply(
                    identity,
                    req.sender,
                    "refused",
                    decided.reason,
                    config=None,
                    now_ms=now_ms,
                    reply=reply,
                )
                return
            state = decided
            status = state.value
        except (KeyFileError, ValueError) as exc:
            self._reply(
                identity,
                req.sender,
                "rejected",
                f"refused: {exc}",
                config=None,
                now_ms=now_ms,
                reply=reply,
            )
            return
        if state is not KeyState.ACCEPTED:
            message = {
                "pending": f"key of {req.sender} is pending: an admin must accept it "
                f"(pushjobs key accept {req.sender})",
                "rejected": f"key of {req.sender} is rejected or revoked",
                "denied": f"another key is registered for {req.sender}; this one is denied",
            }[status]
            log.debug("config request from %s: %s", req.sender, status)
            self._reply(
                identity, req.sender, status, message, config=None, now_ms=now_ms, reply=reply
            )
            return
        first = self._online_elsewhere(req, now)
        if first is not None:
            log.warning(
                "node %s: a second agent (incarnation %s at %s) presents its key while the "
                "agent at %s (incarnation %s) is online; refused until that one goes silent",
                req.sender,
                req.incarnation,
                req.command_endpoint,
                first.command_endpoint,
                first.incarnation,
            )
            self.duplicates[req.sender] = Duplicate(req.command_endpoint, req.incarnation, now)
            message = (
                f"another agent for {req.sender} is online at {first.command_endpoint}; "
                "this one is refused until that one goes silent"
            )
            self._reply(
                identity, req.sender, "denied", message, config=None, now_ms=now_ms, reply=reply
            )
            return
        config = self._admit(req, now)
        if config is None:
            message = "no edge of this server is serving yet; ask again"
            self._reply(
                identity, req.sender, "refused", message, config=None, now_ms=now_ms, reply=reply
            )
            return
        log.debug("config for node %s (endpoint %s)", req.sender, req.command_endpoint)
        if self.edges is not None:
            # Held until the node's edge holds its key: its sockets admit only keys they
            # were given, and libzmq never retries a connection whose handshake was refused.
            held = partial(self._reply, identity, req.sender, "accepted", "", config=config)
            self.edges.after_keys(req.sender, partial(_deliver, held, reply))
            return
        self._reply(identity, req.sender, "accepted", "", config=config, now_ms=now_ms, reply=reply)

    def _not_leader(self, identity: bytes, node: str, now_ms: int, reply: Reply) -> None:
        assert self.membership is not None
        leader = self.membership.leader_api()
        where = f"the leader is at {leader}" if leader else "no leader is known yet"
        frames = self.outbox.frames(
            ConfigReply,
            now_ms,
            node=node,
            status="not_leader",
            message=f"this server is not the leader; {where}",
            config=None,
            leader=leader,
        )
        reply(identity, frames)

    def _online_elsewhere(self, req: ConfigRequest, now: float) -> NodeInfo | None:
        """The node's live agent if ``req`` comes from another one; None otherwise."""
        info = self.nodes.get(req.sender)
        status = self.nodes.liveness.status(req.sender)
        if info is None or status is None or not status.online:
            return None
        if req.incarnation == info.incarnation or req.command_endpoint == info.command_endpoint:
            return None  # the same agent asking again, or a restart on its own port
        if now - status.last_seen > LIVE_SILENCE * self.config.liveness.interval_s:
            return None  # it missed a heartbeat: a restart on a new port, not a second agent
        return info

    def duplicate(self, node: str, now: float) -> Duplicate | None:
        """A second agent refused for ``node`` lately, for ``node status``."""
        seen = self.duplicates.get(node)
        if seen is not None and now - seen.at > DUPLICATE_SHOWN_S:
            del self.duplicates[node]
            return None
        return seen

    def stale_contacts(self, stale: set[str], now: float) -> list[tuple[str, Contact]]:
        """Of the nodes heard under a retired session key, those to tell now, and where."""
        out = []
        for node in sorted(stale):
            contact = self.contacts.get(node)
            if contact is None or now - self.pinged.get(node, -STALE_PING_S) < STALE_PING_S:
                continue
            self.pinged[node] = now
            log.info("node %s: heard under a retired session key; asking it to rediscover", node)
            out.append((node, contact))
        return out

    def _admit(self, req: ConfigRequest, now: float) -> NodeConfig | None:
        """The node's config, its session key issued; None when no edge serves it."""
        heartbeat_endpoint, reply_endpoint = self.heartbeat_endpoint, self.reply_endpoint
        server_incarnation = self.server_incarnation
        placed = None
        if self.edges is not None:
            placed = self.edges.place(req.sender)
            if placed is None:
                return None
            heartbeat_endpoint, reply_endpoint = placed[1]["heartbeat"], placed[1]["reply"]
            # Its edge signs the heartbeats it hears and holds its session key: the node
            # must rediscover when that edge restarts, not when the leader changes.
            server_incarnation = self.edges.incarnation_of(placed[0])
        known = self.nodes.get(req.sender)
        restarted = known is None or known.incarnation != req.incarnation
        session = self.sessions.issue(req.sender, now, restarted=restarted)
        if placed is not None and self.edges is not None:
            # The edge gets the key (with this turn's others) before the node its config.
            key = [
                req.sender,
                session.key_id,
                session.secret_b64,
                restarted,
                req.curve_public,
                req.command_endpoint,
                # What the edge hands a next leader, so the node need not ask it again.
                dict(req.facts),
                list(req.tags),
            ]
            self.edges.give_key(placed[0], key)
        self.nodes.register(req.sender, req.command_endpoint, req.facts, req.tags)
        old = self.contacts.get(req.sender)
        if old is not None and old.curve != req.curve_public:
            self.channels.forget(old.endpoint, old.curve)  # a re-keyed node: its old socket
        self.contacts[req.sender] = Contact(req.command_endpoint, req.curve_public)
        live, proto = self.config.liveness, self.config.protocol
        return NodeConfig(
            server_id=self.config.server.name,
            server_incarnation=server_incarnation,
            heartbeat_endpoint=heartbeat_endpoint,
            reply_endpoint=reply_endpoint,
            server_ed25519_public=b64(self.identity.public.ed25519_public),
            server_curve_public=self.identity.public.curve_public,
            interval_s=live.interval_s,
            offline_threshold=live.offline_threshold,
            online_threshold=live.online_threshold,
            max_skew_s=proto.max_skew_s,
            max_body_bytes=proto.max_body_bytes,
            session_key_id=session.key_id,
            session_key_b64=session.secret_b64,
            lifetime_s=self.config.server.config_lifetime_s,
        )

    def _reply(
        self,
        identity: bytes,
        node: str,
        status: str,
        message: str,
        *,
        config: NodeConfig | None,
        now_ms: int,
        reply: Reply,
    ) -> None:
        frames = self.outbox.frames(
            ConfigReply, now_ms, node=node, status=status, message=message, config=config
        )
        reply(identity, frames)

    # --- revocation -----------------------------------------------------------------------

    def revoked(self) -> list[str]:
        """Cut off every node whose key is no longer accepted; their names."""
        # Sessions are only issued to accepted keys: nothing to revoke until the file
        # changes. With 50,000 nodes a full pass costs tens of milliseconds.
        entries = self.registry.entries()
        if entries is self.checked_entries:
            return []
        self.checked_entries = entries
        gone = []
        for node in self.sessions.nodes():
            entry = self.registry.find(node)
            if entry is not None and entry.state is KeyState.ACCEPTED:
                continue
            log.warning("node %s: key no longer accepted; cutting it off", node)
            self.sessions.revoke(node)
            # Its command socket stays: the server still tells it to abort its job now,
            # and to rediscover once its key is accepted again (``contacts``).
            gone.append(node)
        return gone


@dataclass(slots=True)
class Adopted:
    """What became of the nodes an edge brought (``Enrolment.adopt``)."""

    taken: int = 0
    online: list[tuple[str, str, str]] = field(default_factory=list)  # node, inc., endpoint
    ask_again: list[str] = field(default_factory=list)  # no accepted key of theirs now
    elsewhere: list[str] = field(default_factory=list)  # placed on another edge since


def _adoptable(registry: KeyRegistry, served: Served) -> bool:
    entry = registry.find(served.node)
    return (
        entry is not None
        and entry.kind == "node"
        and entry.state is KeyState.ACCEPTED
        and entry.curve_public == served.curve
    )


def node_key_accepted(registry: KeyRegistry, curve_public: str) -> bool:
    """The ZAP check of the reply channel: only accepted node keys may connect."""
    entry = registry.by_curve_key(curve_public)
    return entry is not None and entry.kind == "node" and entry.state is KeyState.ACCEPTED


def node_registered(registry: KeyRegistry, name: str) -> bool:
    """Whether ``name`` is a node of this installation (any key state): a job may target it."""
    entry = registry.find(name)
    return entry is not None and entry.kind == "node"


def user_role(registry: KeyRegistry, name: str) -> str | None:
    """The role of ``name``'s user key (None: no such user key): the policy's ``roles``."""
    entry = registry.find(name)
    if entry is None or entry.kind != "user" or entry.role is None:
        return None
    return str(entry.role)


def registered_nodes(registry: KeyRegistry) -> list[str]:
    """The accepted nodes' names: what a glob may mean right after a takeover, before
    this server has heard them (``Jobs``)."""
    return [
        entry.name
        for entry in registry.entries()
        if entry.kind == "node" and entry.state is KeyState.ACCEPTED
    ]


def _deliver(held: Callable[..., None], reply: Reply, now_ms: int) -> None:
    """Send a config reply held for its edge (``Enrolment.config_request``)."""
    held(now_ms=now_ms, reply=reply)
