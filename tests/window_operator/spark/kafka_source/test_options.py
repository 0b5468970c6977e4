"""Options: parsing and validation."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from window_operator.spark.kafka_source.options import parse_options  # noqa: E402


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="bootstrap"):
        parse_options({"subscribe": "a"})
    with pytest.raises(ValueError, match="subscribe"):
        parse_options({"kafka.bootstrap.servers": "x:1"})
    with pytest.raises(ValueError, match="startingOffsets"):
        parse_options({"kafka.bootstrap.servers": "x:1", "subscribe": "a", "startingoffsets": "{"})
    with pytest.raises(ValueError, match="maxOffsetsPerTrigger"):
        parse_options(
            {"kafka.bootstrap.servers": "x:1", "subscribe": "a", "maxOffsetsPerTrigger": "0"}
        )
    opts = parse_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "x:1",
            "SUBSCRIBE": "a, b",
            "STARTINGOFFSETS": '{"a": {"0": 5, "1": -1}}',
            "kafka.client.id": "me",
            "kafka.fetch.max.bytes": "1000000",
        }
    )
    assert opts.topics == ("a", "b") and opts.isolation_level == "read_committed"
    assert opts.starting_offsets == {"a": {"0": 5, "1": -1}}
    assert opts.consumer_config()["client.id"] == "me"
    assert opts.consumer_config()["enable.auto.commit"] is False
    assert "fetch.max.bytes" not in opts.admin_config()
