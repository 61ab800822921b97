"""A member of a group over several topics in its own process, for takeover tests.

    python -m tests.log.share_proc SPEC_JSON GROUP MEMBER_ID SESSION_S TOPIC...

Prints one flushed line per change of what it owns: ``owns TOPIC:EPOCH ...`` (``owns``
alone when nothing). It exits when its stdin closes, so a dead test run takes it along.
"""

from __future__ import annotations

import json
import sys
import threading

from tests.log.spec import open_from_spec


def main() -> None:
    spec, group, member_id = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    session_s, topics = float(sys.argv[4]), sys.argv[5:]
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

    log = open_from_spec(spec)
    share = log.group(group, topics, member_id, session_timeout_s=session_s)
    said = None
    while not stop.is_set():
        owned = share.poll()
        line = " ".join(["owns", *(f"{t}:{f.epoch}" for t, f in sorted(owned.items()))])
        if line != said:
            print(line, flush=True)
            said = line
        # The member's own heartbeat interval, not a test waiting: stop ends it at once.
        stop.wait(min(0.05, session_s / 10))
    share.close()
    log.close()


if __name__ == "__main__":
    main()
