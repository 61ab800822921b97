"""Due times of many schedules in one heap: no thread or timer per schedule. Pure.

Theory of operation. ``arm(key, due_ms)`` records the one due time a key waits for and
pushes it; ``disarm`` forgets it. Entries are never removed from the middle of the heap:
an entry whose due time is no longer its key's (re-armed, disarmed) is dropped when it
reaches the top (lazy deletion), and the heap is rebuilt when such stale entries
outnumber the live ones, so memory stays proportional to the keys armed.

Killed at any line: held in memory only; the partition's owner re-arms it from the log.
"""

from __future__ import annotations

import heapq


class DueHeap:
    __slots__ = ("_due", "_heap")

    def __init__(self) -> None:
        self._heap: list[tuple[int, str]] = []
        self._due: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def due_of(self, key: str) -> int | None:
        return self._due.get(key)

    def arm(self, key: str, due_ms: int) -> None:
        if self._due.get(key) == due_ms:
            return
        self._due[key] = due_ms
        heapq.heappush(self._heap, (due_ms, key))
        self._compact_if_stale()

    def disarm(self, key: str) -> None:
        if self._due.pop(key, None) is not None:
            self._compact_if_stale()

    def next_due_ms(self) -> int | None:
        """The earliest due time armed, or None when nothing is."""
        self._drop_stale_top()
        return self._heap[0][0] if self._heap else None

    def peek_due(self, now_ms: int) -> list[str]:
        """The keys due at or before ``now_ms``, left armed: a walk of the heap that stops
        below every entry due later, so it costs what it finds."""
        heap, due, out = self._heap, self._due, []
        stack = [0] if heap else []
        while stack:
            i = stack.pop()
            due_ms, key = heap[i]
            if due_ms > now_ms:
                continue
            if due.get(key) == due_ms:
                out.append(key)
            stack += [c for c in (2 * i + 1, 2 * i + 2) if c < len(heap)]
        return out

    def pop_due(self, now_ms: int) -> list[tuple[str, int]]:
        """Every (key, due) due at or before ``now_ms``, in due order; they are disarmed."""
        out: list[tuple[str, int]] = []
        while True:
            self._drop_stale_top()
            if not self._heap or self._heap[0][0] > now_ms:
                return out
            due_ms, key = heapq.heappop(self._heap)
            del self._due[key]
            out.append((key, due_ms))

    def clear(self) -> None:
        self._heap.clear()
        self._due.clear()

    def _drop_stale_top(self) -> None:
        heap, due = self._heap, self._due
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def _compact_if_stale(self) -> None:
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(d, k) for k, d in self._due.items()]
            heapq.heapify(self._heap)
