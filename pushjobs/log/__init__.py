"""The ordered log with Kafka semantics (DESIGN section 7)."""
