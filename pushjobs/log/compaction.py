"""How a handle of an embedded backend (memory, sqlite) compacts, besides each topic's policy.

``Compaction`` holds the handle's two settings: how long compaction keeps a tombstone
(``delete_retention_ms``), and after how many appends to a topic the handle compacts it
on its own (``every_appends``, 0: only when asked). It counts the appends itself, in the
handle only. A process killed at any line loses the counts, and so does a restart: the
new handle starts counting from zero, so a topic's next compaction comes up to
``every_appends`` appends late, never early, and never wrong, since compacting a topic
again only applies its policy again.
"""

from __future__ import annotations

# Kafka's delete.retention.ms default: how long a tombstone outlives compaction, so that
# a consumer reading incrementally still sees the delete.
DEFAULT_DELETE_RETENTION_MS = 24 * 3600 * 1000


class Compaction:
    """One handle's compaction settings and its count of appends per topic."""

    def __init__(self, every_appends: int, delete_retention_ms: int) -> None:
        self.every_appends = every_appends
        self.delete_retention_ms = delete_retention_ms
        self._appends: dict[str, int] = {}

    def due(self, topic: str, count: int) -> bool:
        """Count ``count`` appended records; True (and restart the count) if it is time."""
        if self.every_appends <= 0:
            return False
        done = self._appends.get(topic, 0) + count
        if done < self.every_appends:
            self._appends[topic] = done
            return False
        self._appends[topic] = 0
        return True
