"""The server's I/O shell: sockets, the ordered log, leadership and takeover, node intake,
the log-first flush of job effects, the scheduler's log work, metrics, configuration.

Imports ``server.core``, never ``server.front``."""
