"""How a Kafka group member leaves its group: never through librdkafka's consumer close.

Why not ``Consumer.close()``. librdkafka's close serves, on the calling thread, the
rebalance events still queued for the consumer. confluent-kafka runs each one holding the
GIL and, when the application's callback did not assign or unassign, calls
``rd_kafka_incremental_assign``/``unassign`` itself, still holding the GIL. That call waits
for the consumer group's own thread to answer, which it may never do once close has begun
terminating the group: seen on librdkafka 2.16 with the mock cluster whenever an assignment
arrived after the member's last poll (a server releasing a partition it joined a moment
before). The GIL is then held for good and every Python thread stops: the thread waiting
for the closer with a bounded join cannot return, nor can one starting the next closer
(``Thread.start`` waits for the new thread, which needs the GIL).

So a member leaves in two steps, and no rebalance event is ever served while the group
terminates:

1. ``drain_and_unsubscribe``, on the caller's thread while the group is alive:
   ``unsubscribe()``, then polls serve the rebalance events that follow (a late assignment,
   then the revocation) until nothing is assigned, for at most ``DRAIN_POLLS`` polls of
   ``DRAIN_POLL_S``. The group's thread answers every assign and unassign there. With the
   ``consumer`` protocol, unsubscribing is leaving the group: the next member is assigned at
   once (0.8 s on the mock, as with close).
2. ``destroy_detached``: the last reference to the consumer is dropped on a thread of its
   own, so confluent-kafka destroys it as it does a garbage-collected consumer, without a
   consumer close (librdkafka drops queued events instead of serving them) and with the GIL
   released. The caller waits a bounded time; a destroy that does not finish leaks one
   client and holds up nothing else.

With the ``classic`` protocol, unsubscribing rebalances the group first (seconds on the
mock), so the assignment may still be held when the drain gives up: the broker's session
timeout then ends the membership (about twice as slow a handover as a close).
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.01
DRAIN_POLLS = 100  # about 1 s: a bound that needs no clock
DESTROY_WAIT_S = 10.0


def drain_and_unsubscribe(ck: ModuleType, consumer: Any, what: str) -> bool:
    """Unsubscribe and serve the rebalance events until nothing is assigned; True if so."""
    try:
        consumer.unsubscribe()
        for _ in range(DRAIN_POLLS):
            consumer.poll(DRAIN_POLL_S)
            if not consumer.assignment():
                return True
    except (ck.KafkaException, RuntimeError) as exc:
        log.info("%s: leaving the group: %s", what, exc)
        return False
    log.info("%s: still assigned after unsubscribing; the broker's session timeout ends it", what)
    return False


def destroy_detached(box: list[Any], what: str, wait_s: float = DESTROY_WAIT_S) -> bool:
    """Destroy the consumer that ``box`` holds (its only reference) on a thread of its own.

    True if the destroy finished within ``wait_s``. The caller must hold no other
    reference, or the consumer outlives the thread and is destroyed wherever the garbage
    collector frees it.
    """
    destroyer = threading.Thread(
        target=_destroy, args=(box,), name=f"kafka-destroy {what}", daemon=True
    )
    destroyer.start()
    destroyer.join(wait_s)
    if destroyer.is_alive():
        log.warning("%s: destroying the consumer did not finish within %g s", what, wait_s)
        return False
    return True


def _destroy(box: list[Any]) -> None:
    consumer = box.pop()
    # The last reference: confluent-kafka destroys the client here, without a consumer
    # close (no rebalance event is served) and with the GIL released.
    del consumer
