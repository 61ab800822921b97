"""The server's key registry: where it lives (the log or a file) and who may write it.

Theory of operation. With ``key_store = "log"`` (the default) the
registry is the ordered log's ``keys`` topic (``keys.topicstore``), so every server of an
installation, on any host that reaches the log, sees the same keys. At start, a
``registry.json`` beside a ``keys`` topic that never held a record is imported once
(``keys.importer``). With ``key_store = "file"`` the registry is the file, as before.

Two registries come out: the loop's, and the ZAP handler's, which runs on its own thread.
Over the log, the ZAP handler's is a read-only view of what the loop last folded
(``LogStore.snapshot``): it never touches the log, so it never waits on a write of the
loop's, and it sees every key the loop admitted (admission writes them before the config
reply that lets the node connect). Over a file, it gets its own handle and file cache.

Writes are the leader's, fenced with its epoch (``Leadership.append``). A name's record
holds all its entries as the writer saw them, so an unfenced late write of a deposed
leader (one stopped for longer than its lease, then woken) would put its old view of a
name over its successor's newer decision: ``pending`` over an accepted key, or a revoked
key back to ``accepted``. Fenced, SQLite refuses such a write and Kafka readers skip it.
Nothing else writes here from a server: admission and enrolment run on the leader only
(a standby answers config requests "not the leader"), and a standby answers key changes
through the API "not the leader" (``server/front/keymethods.py``, ``writable``), so the CLI goes
to the leader. Only the one-time import writes unfenced, before this server has a lease.

Killed at any line: the log holds every write or none of it; a restarted server folds the
topic again. An import killed half way is covered by ``keys.importer``.
"""

from __future__ import annotations

from keys.importer import import_once
from keys.registry import KeyRegistry
from keys.topicstore import FOLLOW_S, LogStore, Write
from pushjobs.clock import Clock
from pushjobs.errors import ApiError, KeyFileError
from pushjobs.log.base import Batch, OrderedLog
from pushjobs.log.topics import TopicNames
from server.shell.leadership import Leadership
from server.shell.serverconfig import ServerSection


def open_registries(
    section: ServerSection,
    log_: OrderedLog,
    topics: TopicNames,
    leadership: Leadership,
    clock: Clock,
) -> tuple[KeyRegistry, KeyRegistry]:
    """The loop's registry and the ZAP handler thread's."""
    path = section.registry_path()
    if section.key_store == "file":
        return KeyRegistry(path, clock=clock), KeyRegistry(path, clock=clock)
    import_once(log_, topics.keys, path)
    store = LogStore(
        log_,
        topics.keys,
        clock=clock,
        follow_s=min(FOLLOW_S, section.registry_check_s),
        write=leader_write(leadership, topics.keys),
        writable=lambda: leadership.leader,
    )
    return KeyRegistry(store, clock=clock), KeyRegistry(store.snapshot(), clock=clock)


def leader_write(leadership: Leadership, topic: str) -> Write:
    """Registry writes fenced by the leader's epoch; KeyFileError on a standby."""

    def write(batch: Batch) -> None:
        if not leadership.leader:
            raise KeyFileError("this server is not the leader: the leader writes key changes")
        try:
            leadership.append(topic, batch)
        except ApiError as exc:  # deposed: fenced by the log, and standing by now
            raise KeyFileError(str(exc)) from None

    return write
