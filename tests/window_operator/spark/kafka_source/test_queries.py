"""The driver's broker queries: what a failed attempt's warning says."""

from __future__ import annotations

from window_operator.kafka_admin import BrokerUnreachableError
from window_operator.spark.kafka_source.queries import _reason


def test_a_broker_gone_from_a_running_job_is_not_told_to_be_started_locally() -> None:
    """A command that reaches no broker suggests `window-operator broker`; a running
    job's source whose broker went away said the same, at every retry."""
    gone = BrokerUnreachableError("kafka:9092", 30, "Connection refused")
    assert "window-operator broker" in str(gone)
    assert _reason(gone) == "no Kafka broker answered within 30s (Connection refused)"
    assert _reason(ValueError("other")) == "other"
