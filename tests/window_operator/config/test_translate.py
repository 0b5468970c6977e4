"""The error messages users see: dotted field paths and what is allowed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from configkit import ROOT, minimal, one_problem, problem_lines

from window_operator.config import ConfigError, ConfigProblem, parse_config


def test_error_message_format_is_exact() -> None:
    doc = minimal()
    doc["window"] = {"type": "tumblng", "size": "1m"}
    doc["input"]["format"] = "xml"
    doc["windw"] = {}
    with pytest.raises(ConfigError) as info:
        parse_config(doc, base_dir=ROOT, source="jobs/clicks.yaml")
    assert str(info.value) == "\n".join(
        [
            "invalid job config jobs/clicks.yaml:",
            "  - input.format: must be one of json, avro (got 'xml')",
            "  - window.type: must be one of tumbling, hopping, session, count, offsets"
            " (got 'tumblng')",
            "  - windw: unknown key (allowed keys: job, input, window, aggregations, watermark,"
            " emit, retention, output, state, processing, kafka, spark, metrics);"
            " did you mean 'window'?",
        ]
    )
    assert info.value.source == "jobs/clicks.yaml"
    assert info.value.problems[0] == ConfigProblem(
        "input.format", "must be one of json, avro (got 'xml')"
    )


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [
        pytest.param(
            lambda d: d["window"].update(size="5x"),
            "window.size",
            "'5x' is not a duration: use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d",
            id="bad-duration",
        ),
        pytest.param(
            lambda d: d["window"].update(size="0s"),
            "window.size",
            "'0s' is not a positive duration: it must be longer than 0",
            id="zero-size",
        ),
        pytest.param(
            lambda d: d["window"].pop("type"),
            "window.type",
            "required: one of tumbling, hopping, session, count, offsets",
            id="window-type-missing",
        ),
        pytest.param(
            lambda d: d.update(window=None),
            "window",
            "must be a mapping (got null)",
            id="window-not-mapping",
        ),
        pytest.param(
            lambda d: d["window"].update(step="10s"),
            "window.step",
            "unknown key (allowed keys: type, size)",
            id="tumbling-step",
        ),
        pytest.param(
            lambda d: d["input"].update(timestamp_unit="sec"),
            "input.timestamp_unit",
            "must be one of ms, s, us, ns, iso8601 (got 'sec')",
            id="literal",
        ),
        pytest.param(
            lambda d: d["input"].update(avro_wire="raw"),
            "input.avro_wire",
            "must be one of schemaless, confluent (got 'raw')",
            id="avro-wire",
        ),
        pytest.param(
            lambda d: d["input"].pop("timestamp"),
            "input.timestamp",
            "required: the record field that holds the event time (or timestamp_from: kafka, "
            "to take the Kafka record timestamp as the event time)",
            id="missing-nested",
        ),
        pytest.param(lambda d: d.pop("input"), "input", "required key is missing", id="missing"),
        pytest.param(
            lambda d: d["input"].update(tiemstamp="t"),
            "input.tiemstamp",
            "unknown key (allowed keys: topic, format, avro_schema, avro_wire, key, key_from,"
            " key_format, timestamp, timestamp_from, timestamp_unit, fields); did you mean"
            " 'timestamp'?",
            id="nested-unknown-key",
        ),
        pytest.param(
            lambda d: d["aggregations"].append({"name": "m", "op": ""}),
            "aggregations.1.op",
            "must not be empty",
            id="empty-op",
        ),
        pytest.param(
            lambda d: d["aggregations"].append({"name": "m"}),
            "aggregations.1.op",
            "required key is missing",
            id="missing-op",
        ),
        pytest.param(
            lambda d: d["aggregations"].append({"name": "m", "op": 7}),
            "aggregations.1.op",
            "must be a string (got 7)",
            id="op-type",
        ),
        pytest.param(  # YAML 1.1 reads `job: off` as false
            lambda d: d.update(job=False),
            "job",
            "must be a string (got false: YAML reads an unquoted yes, no, on, off, true "
            "or false as a boolean; write it in quotes)",
            id="yaml-boolean",
        ),
        pytest.param(
            lambda d: d["input"].update(key=False),
            "input.key",
            "must be a field name (got false: YAML reads an unquoted yes, no, on, off, "
            "true or false as a boolean; write it in quotes)",
            id="yaml-boolean-key",
        ),
        pytest.param(
            lambda d: d["aggregations"].append({"name": "m", "op": "max", "feild": "x"}),
            "aggregations.1.feild",
            "unknown key (allowed keys: name, op, field, params); did you mean 'field'?",
            id="aggregation-unknown-key",
        ),
        pytest.param(
            lambda d: d.update(aggregations=[]),
            "aggregations",
            "must list at least one aggregation",
            id="no-aggregations",
        ),
        pytest.param(
            lambda d: d.update(aggregations={"name": "n"}),
            "aggregations",
            "must be a list (got a mapping)",
            id="aggregations-not-list",
        ),
        pytest.param(
            lambda d: d.update(retention={"size": "many"}),
            "retention.size",
            "must be an integer (got 'many')",
            id="int-type",
        ),
        pytest.param(
            lambda d: d.update(retention={"size": 0}),
            "retention.size",
            "must be greater than 0 (got 0)",
            id="positive-int",
        ),
        pytest.param(
            lambda d: d.update(retention={"time": "-1h"}),
            "retention.time",
            "'-1h' is not a duration: durations cannot be negative",
            id="negative-duration",
        ),
        pytest.param(
            lambda d: d.update(emit={"late": "sometimes"}),
            "emit.late",
            "'sometimes' is not a duration: use a number with a unit, e.g. 250ms, 30s, 5m, 1h,"
            " 1d; or per_arrival, or off",
            id="emit-late",
        ),
        pytest.param(
            lambda d: d.update(emit={"early": "0s"}),
            "emit.early",
            "'0s' is not a positive duration; use null/off to disable",
            id="emit-early-zero",
        ),
        pytest.param(
            lambda d: d.update(spark={"trigger": "now"}),
            "spark.trigger",
            "'now' is not a duration: use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d;"
            " or available_now",
            id="spark-trigger",
        ),
        pytest.param(
            lambda d: d.update(kafka={"producer": {"linger.ms": 0.5}}),
            "kafka.producer.linger.ms",
            "a librdkafka setting must be a string, an integer or a boolean (got 0.5)",
            id="kafka-setting",
        ),
        pytest.param(
            lambda d: d.update(output={"format": "csv"}),
            "output.format",
            "must be one of json, avro (got 'csv')",
            id="output-format",
        ),
        pytest.param(
            lambda d: d.update(output={"topic": "has space"}),
            "output.topic",
            "must be a Kafka topic name: 1 to 249 letters, digits, '.', '_' or '-'"
            " (got 'has space')",
            id="topic-name",
        ),
        pytest.param(
            lambda d: d.update(job="-bad/name"),
            "job",
            "must start with a letter or digit and contain only letters, digits, '.', '_' and"
            " '-' (got '-bad/name')",
            id="job-name",
        ),
        pytest.param(
            lambda d: d.update(state={"dir": ""}),
            "state.dir",
            "must be a non-empty path",
            id="state-dir",
        ),
        pytest.param(  # before: accepted, then `run` failed with a traceback
            lambda d: d.update(state={"dir": "st\x00ate"}),
            "state.dir",
            "must not contain a NUL character (no file system takes one)",
            id="state-dir-nul",
        ),
    ],
)
def test_error_names_field_and_allowed_values(mutate: Any, path: str, message: str) -> None:
    doc = copy.deepcopy(minimal())
    mutate(doc)
    assert one_problem(doc) == (path, message)


def test_every_problem_is_listed() -> None:
    doc = minimal()
    doc["window"]["size"] = "5x"
    doc["aggregations"].append({"name": "n", "op": "max", "field": "v"})
    doc["emit"] = {"late": "never"}
    doc["kafka"] = {"bootstrap": "x"}
    paths = [line.partition(": ")[0] for line in problem_lines(doc)]
    assert paths == ["window.size", "aggregations.1.name", "emit.late", "kafka.bootstrap"]


@pytest.mark.parametrize(
    ("key", "shown"), [(True, "true"), (False, "false"), (7, "7"), (None, "null")]
)
def test_a_key_that_is_not_a_string_is_shown_as_written(key: object, shown: str) -> None:
    """pydantic reports the key true as 1 in its location."""
    doc: dict[Any, Any] = minimal()
    doc[key] = "x"
    assert one_problem(doc) == (shown, f"keys should be strings (got {shown})")


def test_a_null_window_type_is_a_missing_one() -> None:
    doc = minimal() | {"window": {"type": None, "size": "1m"}}
    assert one_problem(doc) == (
        "window.type",
        "required: one of tumbling, hopping, session, count, offsets (got null)",
    )


def test_a_transposed_key_is_suggested_before_another_close_one() -> None:
    """``stpe`` is as close to ``type`` as to ``step`` for difflib: the transposition wins."""
    doc = minimal() | {"window": {"type": "hopping", "size": "1m", "step": "10s", "stpe": 1}}
    assert one_problem(doc) == (
        "window.stpe",
        "unknown key (allowed keys: type, size, step); did you mean 'step'?",
    )


def test_a_yaml_boolean_for_a_choice_says_to_quote_it() -> None:
    doc = minimal() | {"processing": {"guarantee": False}}
    assert one_problem(doc) == (
        "processing.guarantee",
        "must be one of exactly_once, at_least_once (got false: YAML reads an unquoted yes, "
        "no, on, off, true or false as a boolean; write it in quotes)",
    )
