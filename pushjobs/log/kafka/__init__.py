"""The Kafka backend of the ordered log (the ``kafka`` extra: confluent-kafka, imported lazily)."""
