"""Identity keys, key files and the key registry."""
