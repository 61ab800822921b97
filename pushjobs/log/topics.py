"""The standard topics, their policies, and the call that creates them.

Every name carries a prefix (default ``pushjobs.``), so several installations, or tests,
can share one cluster without seeing each other's records.
"""

from __future__ import annotations

from dataclasses import dataclass

from pushjobs.log.base import OrderedLog, TopicPolicy

DEFAULT_PREFIX = "pushjobs."
# Keep-alives and leader claims are only worth their latest few minutes.
CONTROL_RETENTION_MS = 15 * 60 * 1000
# Events feed the pipeline's archiver; a week leaves room for it to be down a while.
EVENTS_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class StandardTopic:
    suffix: str
    key: str
    value: str
    policy: TopicPolicy


COMMANDS = StandardTopic(
    "commands",
    "job:<id>",
    "job request: start (with options) or abort",
    TopicPolicy(compacted=True),
)
ASSIGNMENTS = StandardTopic(
    "assignments", "job:<id>", "latest full job snapshot", TopicPolicy(compacted=True)
)
CONTROL = StandardTopic(
    "control",
    "server:<id>",
    "server keep-alive and leader claim",
    TopicPolicy(compacted=True, retention_ms=CONTROL_RETENTION_MS),
)
EVENTS = StandardTopic(
    "events",
    "job:<id> or liveness",
    "state changes: a job's own one record each; its node changes of a turn together; "
    "the nodes gone online or offline in a turn together",
    TopicPolicy(compacted=False, retention_ms=EVENTS_RETENTION_MS),
)
SCHEDULES = StandardTopic(
    "schedules",
    "schedule:<id>",
    "schedule definition, its due times settled so far and its last fires",
    TopicPolicy(compacted=True),
)
# Every server of an installation reads the key registry from here.
KEYS = StandardTopic(
    "keys",
    "key:<name>",
    "every key registry entry of the name (state, role, public keys); tombstone on delete",
    TopicPolicy(compacted=True),
)
# The audit trail's signed checkpoints (``pushjobs.audit``): small, one a server a minute
# at most, and the evidence for every other topic's records, so never cleaned up.
AUDIT = StandardTopic(
    "audit",
    "checkpoint:<server>",
    "signed checkpoints of the audit trail: each writer's chain heads and listed records",
    TopicPolicy(compacted=False),
)
STANDARD = (COMMANDS, ASSIGNMENTS, CONTROL, EVENTS, SCHEDULES, KEYS, AUDIT)


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The full names of the standard topics under one prefix."""

    commands: str
    assignments: str
    control: str
    events: str
    schedules: str
    keys: str
    audit: str

    def all(self) -> tuple[str, ...]:
        return (
            self.commands,
            self.assignments,
            self.control,
            self.events,
            self.schedules,
            self.keys,
            self.audit,
        )


def names(prefix: str = DEFAULT_PREFIX) -> TopicNames:
    return TopicNames(*(prefix + topic.suffix for topic in STANDARD))


def policies(
    prefix: str = DEFAULT_PREFIX,
    *,
    control_retention_ms: int = CONTROL_RETENTION_MS,
    events_retention_ms: int = EVENTS_RETENTION_MS,
) -> dict[str, TopicPolicy]:
    """Full topic name -> policy, with the two retentions adjustable."""
    result = {prefix + topic.suffix: topic.policy for topic in STANDARD}
    result[prefix + CONTROL.suffix] = TopicPolicy(compacted=True, retention_ms=control_retention_ms)
    result[prefix + EVENTS.suffix] = TopicPolicy(retention_ms=events_retention_ms)
    return result


def create_standard_topics(
    log: OrderedLog,
    prefix: str = DEFAULT_PREFIX,
    *,
    control_retention_ms: int = CONTROL_RETENTION_MS,
    events_retention_ms: int = EVENTS_RETENTION_MS,
) -> TopicNames:
    """Create the standard topics that do not exist yet (existing ones keep their policy)."""
    wanted = policies(
        prefix, control_retention_ms=control_retention_ms, events_retention_ms=events_retention_ms
    )
    for name, policy in wanted.items():
        log.create_topic(name, policy)
    return names(prefix)


def resolve(name: str, existing: set[str], prefix: str = DEFAULT_PREFIX) -> str:
    """An operator's topic name: a full name, or a standard one without its prefix."""
    if name in existing or prefix + name not in existing:
        return name
    return prefix + name
