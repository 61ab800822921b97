"""The ordered log with Kafka semantics."""
