"""The API between the CLI (and agents' config discovery) and the server."""
