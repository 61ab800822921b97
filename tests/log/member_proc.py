"""A consumer-group member in its own process, for takeover tests.

    python -m tests.log.member_proc SPEC_JSON GROUP TOPIC MEMBER_ID SESSION_S [MAX_CONSUME]

Prints one flushed line per event: ``ready`` once joined; ``owner <epoch>`` whenever it
becomes the owner; ``lost`` when it stops being the owner; ``consumed <offset>`` for each
record it processes as owner, from the group's committed offset, committing offset + 1
right after. After MAX_CONSUME records it only keeps its lease, so a test can kill it
with work left. It exits when its stdin closes, so a dead test run takes it along.
"""

from __future__ import annotations

import json
import sys
import threading

from tests.log.spec import open_from_spec


def main() -> None:
    spec, group, topic, member_id = json.loads(sys.argv[1]), *sys.argv[2:5]
    session_s = float(sys.argv[5])
    max_consume = int(sys.argv[6]) if len(sys.argv) > 6 else -1
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

    log = open_from_spec(spec)
    member = log.member(group, topic, member_id, session_timeout_s=session_s)
    print("ready", flush=True)
    owned: int | None = None
    consumed = 0
    while not stop.is_set():
        epoch = member.poll()
        if epoch != owned:
            print("lost" if epoch is None else f"owner {epoch}", flush=True)
            owned = epoch
        if epoch is not None and consumed != max_consume:
            start = log.committed(group, topic) or 0
            for rec in log.read(topic, start, limit=1):
                print(f"consumed {rec.offset}", flush=True)
                log.commit(group, topic, rec.offset + 1)
                consumed += 1
        # The member's own heartbeat interval, not a test waiting: stop ends it at once.
        stop.wait(min(0.05, session_s / 10))
    member.close()
    log.close()


if __name__ == "__main__":
    main()
