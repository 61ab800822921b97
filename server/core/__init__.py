"""The server's pure core: jobs, their batches and schedules, the coordinator, the node table.

No socket, database, clock or thread: ``now`` and inputs in, effects out. Imports nothing
from ``server.front`` or ``server.shell``."""
