"""A writer in its own process, for crash and concurrency tests.

    python -m tests.log.writer_proc SPEC_JSON TOPIC WRITER [COUNT]

Prints ``ready``, then appends ``<WRITER>-<n>`` under key ``<WRITER>`` for n = 0, 1, ...
and prints ``acked <offset> <n>`` (flushed) after each append returns, i.e. once it is
durable; after COUNT appends (default: until killed) it prints ``done``. It exits when
its stdin closes.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading

from tests.log.spec import open_from_spec


def main() -> None:
    spec, topic, writer = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else None
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

    log = open_from_spec(spec)
    print("ready", flush=True)
    numbers = range(count) if count is not None else itertools.count()
    for n in numbers:
        if stop.is_set():
            break
        offset = log.append(topic, writer, f"{writer}-{n}".encode())
        print(f"acked {offset} {n}", flush=True)
    print("done", flush=True)
    log.close()


if __name__ == "__main__":
    main()
