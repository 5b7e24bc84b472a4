"""The distributed cluster tests: real Kafka, Redis, a Faust worker and several gateway pods."""

from tests.kafka_leaks import absorb_kafka_leaks  # noqa: F401 (autouse fixture)
