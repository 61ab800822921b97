"""The SQLite backend of the ordered log: one file per installation, shared by the servers
of one host."""
