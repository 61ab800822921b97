"""Every message of the wire protocol, as frozen, slotted dataclasses.

Each message carries the signed envelope (``sender``, ``incarnation``,
``sequence``, ``timestamp`` in ms since the epoch) and a ``type`` tag that the codec
writes on the wire. Field types are the schema: the codec (``codec.py``) compiles its
validators from these annotations, so a field added here is validated and encoded with
no other change. Collections are tuples so that messages stay immutable.

Who sends what:

    server -> all      ServerHeartbeat (PUB)
    node   -> server   NodeHeartbeat, job replies: AckCommit NackCommit AckRun NackRun
                       Started Progress Succeeded Failed Aborted (PUSH)
    server -> node     Commit Run Abort Ping (PUSH to the node's command endpoint)
    node   -> server   ConfigRequest / ConfigReply (API DEALER/ROUTER)
    cli    -> server   ApiRequest / ApiReply (API DEALER/ROUTER)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

# A field added to a message after its first version: left off the wire while it holds its
# default, and taken as its default when a peer's message lacks it, so an older peer and a
# newer one still understand each other (the codec is otherwise exact about keys).
OPTIONAL: dict[str, Any] = {"wire": "optional"}

# Type aliases the codec understands: any JSON value, and a JSON object.
Json = Any
JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """The envelope every message carries."""

    TYPE: ClassVar[str] = ""
    sender: str
    incarnation: str
    sequence: int
    timestamp: int


# --- server heartbeat ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerHeartbeat(Message):
    TYPE: ClassVar[str] = "server_heartbeat"
    leader: bool


# --- node -> server ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHeartbeat(Message):
    TYPE: ClassVar[str] = "node_heartbeat"
    command_endpoint: str
    job_id: str | None = None
    job_state: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AckCommit(Message):
    TYPE: ClassVar[str] = "ack_commit"
    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NackCommit(Message):
    TYPE: ClassVar[str] = "nack_commit"
    job_id: str
    reason: str


BUSY_PREFIX = "busy with job "
"""A node refusing a commit because it holds or runs another job says ``busy with job
<that job's id>``: the server tells a holder it should have let go from a holder that is
real (``Coordinator.reply``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AckRun(Message):
    TYPE: ClassVar[str] = "ack_run"
    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NackRun(Message):
    TYPE: ClassVar[str] = "nack_run"
    job_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Started(Message):
    TYPE: ClassVar[str] = "started"
    job_id: str
    pid: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress(Message):
    TYPE: ClassVar[str] = "progress"
    job_id: str
    message: str


@dataclass(frozen=True, slots=True)
class JobOutput:
    """Captured output, each channel truncated to the configured size keeping the tail."""

    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Succeeded(Message):
    TYPE: ClassVar[str] = "succeeded"
    job_id: str
    exit_status: int
    duration_ms: int
    output: JobOutput | None = None
    # Processes of the job the agent could not kill (described: pid, command, user, why).
    left_running: tuple[str, ...] = field(default=(), metadata=OPTIONAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Failed(Message):
    TYPE: ClassVar[str] = "failed"
    job_id: str
    exit_status: int | None
    reason: str
    duration_ms: int
    output: JobOutput | None = None
    left_running: tuple[str, ...] = field(default=(), metadata=OPTIONAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Aborted(Message):
    TYPE: ClassVar[str] = "aborted"
    job_id: str
    reason: str
    duration_ms: int
    output: JobOutput | None = None
    left_running: tuple[str, ...] = field(default=(), metadata=OPTIONAL)


# --- server -> node (each names its target node: endpoints may be shared) ----------------


@dataclass(frozen=True, slots=True)
class FilePayload:
    """A file written on the node before the command runs; content is base64."""

    path: str
    content_b64: str
    mode: int = 0o600


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run a committed command. ``secret_env`` is set in the command's environment
    like ``env``, but its values travel only here (over the encrypted command channel):
    the server keeps them sealed, and nobody prints them, hence ``repr=False``."""

    timeout_s: float = 3600.0
    env: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    user: str | None = None
    capture: bool = False
    file: FilePayload | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Commit(Message):
    TYPE: ClassVar[str] = "commit"
    node: str
    job_id: str
    command: str
    options: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True, slots=True, kw_only=True)
class Run(Message):
    TYPE: ClassVar[str] = "run"
    node: str
    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Abort(Message):
    TYPE: ClassVar[str] = "abort"
    node: str
    job_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping(Message):
    """Heartbeat now; with ``rediscover``, also ask for a config again: the server no longer
    accepts this node's session (its key was revoked and accepted again, or superseded)."""

    TYPE: ClassVar[str] = "ping"
    node: str
    rediscover: bool = False


# --- config discovery (node <-> server over the CurveZMQ API channel) --------------------

# refused: not recorded at all (enrolment is full); the node may ask again later.
# not_leader: a standing-by server serves no node; ``ConfigReply.leader`` names the
# leader's API endpoint when this server knows it.
KeyStatus = Literal["accepted", "pending", "rejected", "denied", "refused", "not_leader"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRequest(Message):
    TYPE: ClassVar[str] = "config_request"
    command_endpoint: str
    ed25519_public: str
    curve_public: str
    facts: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """What an accepted node needs to talk to the server; secret, so only over CurveZMQ."""

    server_id: str
    server_incarnation: str
    heartbeat_endpoint: str
    reply_endpoint: str
    server_ed25519_public: str
    server_curve_public: str
    interval_s: float
    offline_threshold: int
    online_threshold: int
    max_skew_s: float
    max_body_bytes: int
    session_key_id: str
    session_key_b64: str
    lifetime_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigReply(Message):
    """The answer to one node's ``ConfigRequest``; ``node`` names it, so one DEALER can
    carry the discovery of many nodes (a host running many agents, the fleet simulator)."""

    TYPE: ClassVar[str] = "config_reply"
    node: str
    status: KeyStatus
    message: str
    config: NodeConfig | None = None
    leader: str | None = None  # with ``not_leader``: the leader's API endpoint, if known


# --- API envelopes (CLI <-> server) ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorBody:
    code: str
    message: str
    leader: str | None = None  # with ``not_leader``: the leader's API endpoint, if known


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiRequest(Message):
    TYPE: ClassVar[str] = "api_request"
    request_id: str
    method: str
    params: JsonObject = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiReply(Message):
    TYPE: ClassVar[str] = "api_reply"
    request_id: str
    ok: bool
    result: Json = None
    error: ErrorBody | None = None


MESSAGE_TYPES: tuple[type[Message], ...] = (
    ServerHeartbeat,
    NodeHeartbeat,
    AckCommit,
    NackCommit,
    AckRun,
    NackRun,
    Started,
    Progress,
    Succeeded,
    Failed,
    Aborted,
    Commit,
    Run,
    Abort,
    Ping,
    ConfigRequest,
    ConfigReply,
    ApiRequest,
    ApiReply,
)
