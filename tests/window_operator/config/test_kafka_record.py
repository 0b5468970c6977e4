"""``timestamp_from`` and ``key_from``: the event time and the key are record fields, or
the Kafka record's timestamp and key."""

from __future__ import annotations

from typing import Any

import pytest
from configkit import ROOT, minimal, one_problem, problem_lines

from window_operator.config import ConfigError, JoinJobConfig, parse_any_config, parse_config


def join_doc(**left: Any) -> dict[str, Any]:
    return {
        "job": "oj",
        "join": {
            "left": {"name": "orders", "timestamp": "t", **left},
            "right": {"name": "shipments", "timestamp": "t"},
            "on": ["id"],
            "between": ["-1m", "1m"],
        },
    }


def test_the_kafka_timestamp_needs_no_field() -> None:
    doc = minimal()
    doc["input"] = {"timestamp_from": "kafka"}
    config = parse_config(doc, base_dir=ROOT)
    assert config.input.timestamp is None
    assert config.input.timestamp_field is None
    assert parse_config(minimal(), base_dir=ROOT).input.timestamp_field == "ts"


def test_a_field_and_the_kafka_timestamp_are_refused_together() -> None:
    doc = minimal()
    doc["input"] |= {"timestamp_from": "kafka"}
    path, message = one_problem(doc)
    assert path == "input.timestamp"
    assert message.startswith("leave it out with timestamp_from: kafka")
    assert "'ts'" in message


def test_without_the_kafka_timestamp_the_field_is_required() -> None:
    doc = minimal()
    doc["input"] = {"timestamp_from": "field"}
    path, message = one_problem(doc)
    assert path == "input.timestamp"
    assert message.startswith("required: the record field that holds the event time")
    assert "timestamp_from: kafka" in message


@pytest.mark.parametrize("unit", ["s", "us", "ns", "iso8601"])
def test_the_kafka_timestamp_is_in_milliseconds(unit: str) -> None:
    doc = minimal()
    doc["input"] = {"timestamp_from": "kafka", "timestamp_unit": unit}
    path, message = one_problem(doc)
    assert path == "input.timestamp_unit"
    assert message.startswith("Kafka record timestamps are epoch milliseconds")


def test_every_event_time_problem_is_named_at_once() -> None:
    """A field and a unit given with the Kafka timestamp: both problems in one message,
    not the second only once the first is mended (a walkthrough)."""
    doc = minimal()
    doc["input"] |= {"timestamp_from": "kafka", "timestamp_unit": "s"}
    lines = problem_lines(doc)
    assert [line.partition(": ")[0] for line in lines] == [
        "input.timestamp",
        "input.timestamp_unit",
    ]


def test_an_unknown_source_of_the_event_time_names_the_choices() -> None:
    doc = minimal()
    doc["input"] |= {"timestamp_from": "header"}
    path, message = one_problem(doc)
    assert path == "input.timestamp_from"
    assert "field" in message and "kafka" in message


def test_a_join_side_takes_the_kafka_timestamp() -> None:
    doc = join_doc(timestamp_from="kafka")
    doc["join"]["left"].pop("timestamp")
    config = parse_any_config(doc, base_dir=ROOT)
    assert isinstance(config, JoinJobConfig)
    assert config.join.left.timestamp_field is None
    assert config.join.right.timestamp_field == "t"


def test_a_join_side_with_both_names_the_side() -> None:
    with pytest.raises(ConfigError) as info:
        parse_any_config(join_doc(timestamp_from="kafka"), base_dir=ROOT)
    assert (
        str(info.value)
        .splitlines()[1]
        .startswith("  - join.left.timestamp: leave it out with timestamp_from: kafka")
    )


def test_the_kafka_key_replaces_the_key_fields() -> None:
    doc = minimal()
    doc["input"] |= {"key_from": "kafka"}
    config = parse_config(doc, base_dir=ROOT)
    assert config.input.kafka_key and config.input.key_fields == ()
    assert not parse_config(minimal(), base_dir=ROOT).input.kafka_key


@pytest.mark.parametrize("key", ["page", ["country", "device"]])
def test_key_fields_and_the_kafka_key_are_refused_together(key: Any) -> None:
    doc = minimal()
    doc["input"] |= {"key_from": "kafka", "key": key}
    path, message = one_problem(doc)
    assert path == "input.key"
    assert message.startswith("leave it out with key_from: kafka")


@pytest.mark.parametrize(
    ("key", "value"), [("key_from", "kafka"), ("key_format", "long"), ("key", "id")]
)
def test_a_join_side_has_no_key_and_says_why(key: str, value: str) -> None:
    """A join keys both sides by its ``on`` fields."""
    with pytest.raises(ConfigError) as info:
        parse_any_config(join_doc(**{key: value}), base_dir=ROOT)
    assert f"join.left.{key}: unknown key (allowed keys: name, topic, format" in str(info.value)
    assert str(info.value).endswith(
        "; a join keys both sides by the fields of join.on, read from each record's value"
    )
    doc = join_doc()
    doc["join"][key] = value  # on the join itself
    with pytest.raises(ConfigError) as info:
        parse_any_config(doc, base_dir=ROOT)
    assert f"join.{key}: unknown key (allowed keys: left, right, on" in str(info.value)
    assert str(info.value).endswith("fields of join.on, read from each record's value")


@pytest.mark.parametrize("key_format", ["string", "long", "int", "bytes"])
def test_the_kafka_key_is_read_in_its_format(key_format: str) -> None:
    doc = minimal()
    doc["input"] |= {"key_from": "kafka", "key_format": key_format}
    config = parse_config(doc, base_dir=ROOT)
    assert config.input.key_format == key_format
    assert parse_config(minimal(), base_dir=ROOT).input.key_format == "string"


def test_a_key_format_without_the_kafka_key_is_refused() -> None:
    """Key fields are read as their values are: a key format would do nothing."""
    doc = minimal()
    doc["input"] |= {"key_format": "long"}
    path, message = one_problem(doc)
    assert path == "input.key_format"
    assert message.startswith("applies to key_from: kafka only")


def test_an_unknown_key_format_names_the_choices() -> None:
    doc = minimal()
    doc["input"] |= {"key_from": "kafka", "key_format": "uuid"}
    path, message = one_problem(doc)
    assert path == "input.key_format"
    assert message == "must be one of string, long, int, bytes (got 'uuid')"


def test_the_far_future_guard_of_a_job_on_kafka_timestamps_is_said_to_be_ignored() -> None:
    """``max_future`` compares the event time with the record timestamp: with
    ``timestamp_from: kafka`` they are one value, and the guard cannot reject anything."""
    doc = minimal()
    doc["input"] = {"timestamp_from": "kafka"}
    doc["watermark"] = {"max_future": "1h"}
    ignored = parse_config(doc, base_dir=ROOT).ignored_settings()
    assert len(ignored) == 1 and ignored[0].startswith(
        "watermark.max_future applies to event times read from a field only"
    )
    del doc["watermark"]  # the default is not the user's
    assert parse_config(doc, base_dir=ROOT).ignored_settings() == []
    join = join_doc(timestamp_from="kafka", timestamp=None)  # the right side reads a field
    join["watermark"] = {"max_future": "1h"}
    assert parse_any_config(join, base_dir=ROOT).ignored_settings() == []
