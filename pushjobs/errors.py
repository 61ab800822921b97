"""The one exception hierarchy of pushjobs.

Every error pushjobs raises on purpose is a ``PushJobsError``. Third-party errors (zmq,
sqlite3, confluent-kafka, cryptography, orjson) are translated into one of these in the
adapter that met them, chained with ``from``, and nowhere else.

    PushJobsError
    ├── ConfigError                 bad or unreadable configuration (names file, key, problem)
    ├── ProtocolError               a frame or message that must be dropped
    │   ├── FrameError              wrong frame count, oversized or unparsable header
    │   │   └── OversizedFrame      a frame over its configured limit
    │   ├── SignatureError          bad, missing or wrong-key signature
    │   │   └── UnknownKey          the header names a key id we do not hold
    │   ├── MalformedMessage        body not a JSON object, unknown type, bad fields
    │   │   └── Rejected            an ``events`` record the archiver sets aside, with why
    │   └── ReplayError             sequence not newer, retired incarnation
    │       └── ClockSkewError      timestamp outside +/- max_skew_s
    ├── KeyFileError                key files and the key registry
    │   ├── MissingKeyFile          no file where a key file was named
    │   ├── KeyRequestError         a key change asked wrongly (a role for a node's key)
    │   ├── InsecureKeyFile         private key readable or writable by group or world
    │   ├── UnknownIdentity         no registry entry with that name
    │   └── KeyStateError           an illegal key state transition
    ├── StateError                  an illegal state machine transition (nothing changed)
    ├── TargetError                 a node selector that is malformed or matches nothing
    ├── ScheduleError               a schedule definition or trigger that cannot be used
    ├── AuditError                  an audit record (checkpoint) that cannot be read
    ├── LogError                    ordered-log failures
    │   ├── LogCorrupt              corrupt, truncated or foreign log file
    │   ├── UnknownTopic
    │   ├── OffsetOutOfRange
    │   ├── RecordTooLarge
    │   ├── FencedError             a write with an epoch older than the owner's
    │   └── BackendUnavailable      a backend cannot be reached or imported
    │       └── NoLogFile           no SQLite log file at the path a reader was given
    ├── ExecutionError              a job's command could not be started on the node
    ├── JournalError                the agent's local journal of seen job ids failed
    ├── TransportError              socket-level failures, translated from zmq
    │   ├── Unreachable             no answer from a peer within the deadline
    │   │   └── NobodyListens       the endpoint refused the connection: nothing was sent
    │   └── HandshakeRefused        the peer refused the CurveZMQ handshake (wrong server key)
    ├── ApiError                    an API call the server refused (carries a code)
    │   ├── Unauthorized            the caller's key or role does not allow it
    │   └── NotFound
    ├── MissingExtra                an optional dependency is not installed
    └── SandboxError                a test bed's process did not start or misbehaved
        └── BrokerUnavailable       no Kafka broker can run here: no Java, Maven or jars
"""

from __future__ import annotations


class PushJobsError(Exception):
    """Root of every error pushjobs raises on purpose."""


class ConfigError(PushJobsError):
    """Configuration that cannot be used; the message names file, key and problem."""

    def __init__(self, problem: str, *, path: str | None = None, key: str | None = None) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        where = ": ".join(part for part in (path, key) if part)
        super().__init__(f"{where}: {problem}" if where else problem)


class ProtocolError(PushJobsError):
    """A frame or message that must be dropped (and counted) by the receiver."""


class FrameError(ProtocolError):
    """Wrong frame count, oversized or unparsable header."""


class OversizedFrame(FrameError):
    """A frame over its configured size limit; checked before anything is parsed."""


class SignatureError(ProtocolError):
    """A signature that does not verify, or one made with an unexpected method."""


class UnknownKey(SignatureError):
    """The header names a key id the receiver does not hold."""


class MalformedMessage(ProtocolError):
    """Body is not a valid message: not a JSON object, unknown type, missing/extra/bad fields."""


class Rejected(MalformedMessage):
    """A record of the ``events`` topic that is not a usable event (``pipeline/events.py``);
    the message says why. The archiver counts it and keeps it aside, never drops it."""


class ReplayError(ProtocolError):
    """Sequence not newer than the last seen, or a retired incarnation."""


class ClockSkewError(ReplayError):
    """Timestamp outside +/- max_skew_s of the receiver's clock."""


class KeyFileError(PushJobsError):
    """A key file that cannot be read or parsed, or a key registry problem."""


class MissingKeyFile(KeyFileError):
    """No file where a key file was named: a missing input (the CLI's exit code 8), or a
    setting naming a file that is not there (``userconfig``: exit code 9)."""


class KeyRequestError(KeyFileError):
    """A key change asked wrongly (a role for a key that is not a user's): a bad argument
    (the CLI's exit code 2), as the server answers it ``bad_request``."""


class InsecureKeyFile(KeyFileError):
    """A private key file that group or world can read or write."""


class UnknownIdentity(KeyFileError):
    """No key registry entry with that name."""


class KeyStateError(KeyFileError):
    """An illegal key state transition; the registry is unchanged."""


class StateError(PushJobsError):
    """An illegal state machine transition; the machine is unchanged."""


class TargetError(PushJobsError):
    """A node selector that cannot be parsed or matches no node."""


class ScheduleError(PushJobsError):
    """A schedule definition or trigger that cannot be used."""


class AuditError(PushJobsError):
    """A record of the audit trail (a checkpoint) that cannot be read as one."""


class LogError(PushJobsError):
    """Ordered-log failure."""


class LogCorrupt(LogError):
    """The log file is corrupt, truncated, or not a pushjobs log."""


class UnknownTopic(LogError):
    """The topic does not exist."""


class OffsetOutOfRange(LogError):
    """A negative offset, or one past the end of the topic."""


class RecordTooLarge(LogError):
    """A value over the configured maximum record size."""


class FencedError(LogError):
    """A write carrying an epoch older than the current owner's: a deposed leader."""


class BackendUnavailable(LogError):
    """The log backend cannot be reached."""


class NoLogFile(BackendUnavailable):
    """No SQLite log file at the path given: a reader (``pushjobs log``, ``archive``) was
    pointed where there is none (the CLI's exit code 8)."""


class ExecutionError(PushJobsError):
    """A job's command could not be started (missing binary, bad cwd, unknown user...)."""


class JournalError(PushJobsError):
    """The agent's journal of seen job ids cannot be read or written."""


class TransportError(PushJobsError):
    """Socket-level failure, translated from zmq."""


class Unreachable(TransportError):
    """No answer from a peer within the deadline."""


class NobodyListens(Unreachable):
    """The endpoint refused the connection: no server listens there, nothing was sent."""


class HandshakeRefused(TransportError):
    """The peer refused the CurveZMQ handshake: most likely the server key we hold is not
    its key. A configuration problem (the CLI's exit code 9), not an ``Unreachable``: no
    wait or retry cures it."""


class ApiError(PushJobsError):
    """An API request the server refused; ``code`` is stable and machine readable."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class Unauthorized(ApiError):
    code = "unauthorized"


class NotFound(ApiError):
    code = "not_found"


class MissingExtra(PushJobsError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, module: str, extra: str) -> None:
        self.module = module
        self.extra = extra
        super().__init__(
            f"{module} is not installed; install the '{extra}' extra: "
            f"pip install 'pushjobs[{extra}]'"
        )


class SandboxError(PushJobsError):
    """A test bed's process (``pushjobs/testbed``) did not start or misbehaved."""


class BrokerUnavailable(SandboxError):
    """No Kafka broker can run for the test bed here (``pushjobs/testbed/kafkabroker.py``):
    no Java, no Maven, or no jars; the message says what is missing."""
