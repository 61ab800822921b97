"""The fleet simulator: one process playing many nodes over a few shared sockets.

``python -m agent.simulator SETTINGS_JSON`` (what ``pushjobs simulate run`` execs)."""
