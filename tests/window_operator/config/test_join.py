"""The join job root: the bare YAML ``on`` key, the one-condition rule, bounds, the wording
of its problems and side names that are topics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from configkit import ROOT

from window_operator.config import ConfigError, JoinJobConfig, load_any_config, parse_any_config


def test_join_job_config_with_a_bare_yaml_on_key(tmp_path: Path) -> None:
    path = tmp_path / "join.yaml"
    path.write_text(
        "job: oj\n"
        "join:\n"
        "  left: {name: orders, timestamp: time}\n"
        "  right: {name: shipments, timestamp: time}\n"
        "  on: [id]\n"
        "  between: [-2m, +5m]\n"
        "  kind: left\n"
    )
    config = load_any_config(path)
    assert isinstance(config, JoinJobConfig)
    assert config.join.on == ("id",)
    assert config.join.bounds == (-120_000, 300_000)
    assert config.join.left.topic_name == "orders"


def test_join_config_needs_exactly_one_condition(tmp_path: Path) -> None:
    data = {
        "job": "oj",
        "join": {
            "left": {"name": "a", "timestamp": "t"},
            "right": {"name": "a", "timestamp": "t"},
            "on": ["id"],
        },
    }
    with pytest.raises(ConfigError) as err:
        parse_any_config(data, base_dir=tmp_path)
    text = str(err.value)
    assert "join.range: set exactly one of join.range, join.between or join.rows" in text
    assert "join.right.name: must differ from join.left.name" in text


def _join_doc(**join: Any) -> dict[str, Any]:
    """A valid join job document, with ``join`` keys replaced."""
    sides = {
        "left": {"name": "orders", "timestamp": "t"},
        "right": {"name": "ships", "timestamp": "t"},
    }
    return {"job": "oj", "join": sides | {"on": ["id"], "range": "1m"} | join}


def _join_problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_any_config(doc, base_dir=ROOT, source="job.yaml")
    return [str(problem) for problem in err.value.problems]


@pytest.mark.parametrize(("between", "got"), [(["-2m"], 1), (["-2m", "1m", "3m"], 3), ([], 0)])
def test_join_between_of_another_length_names_the_list(between: list[str], got: int) -> None:
    """One bound given said ``join.between.1: required key is missing`` (a walkthrough)."""
    assert _join_problems(_join_doc(range=None, between=between)) == [
        f"join.between: must be a list of exactly 2 items (got {got})"
    ]


def test_join_between_is_bounded_either_way() -> None:
    """A plain integer skipped the duration maximum and overflowed checkpoint encoding."""
    doc = _join_doc(range=None, between=[-(10**30), 10**30])
    assert _join_problems(doc) == [
        f"join.between.{i}: {10**30} is too long a duration (at most {2**53}ms)"  # its size
        for i in range(2)
    ]
    doc = _join_doc(range=None, between=[f"-{2**63}ms", "+5m"])
    assert _join_problems(doc) == [
        f"join.between.0: '{2**63}ms' is too long a duration (at most {2**53}ms)"
    ]
    for bound in (2**53, f"{2**53}ms", f"+{2**53}ms"):
        config = parse_any_config(
            _join_doc(range=None, between=[f"-{2**53}", bound]), base_dir=ROOT
        )
        assert isinstance(config, JoinJobConfig)
        assert config.join.bounds == (-(2**53), 2**53)
    assert _join_problems(_join_doc(range=None, rows=2**64)) == [
        f"join.rows: must be at most {2**53} (got {2**64})"
    ]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("retension", "; did you mean 'retention'?"),
        (
            "window",  # a join job has none: what bounds a join instead
            "; a join job has no window: join.range, join.between or join.rows bound which "
            "messages pair (to window its results, run an aggregation job over output.topic)",
        ),
        (
            "aggregations",
            "; a join job has no aggregations: it writes the pairs (to aggregate them, run an "
            "aggregation job over output.topic)",
        ),
        ("input", "; a join reads two inputs: join.left and join.right"),
    ],
)
def test_an_unknown_root_key_of_a_join_job_lists_the_join_jobs_keys(key: str, message: str) -> None:
    assert _join_problems(_join_doc() | {key: {}}) == [
        f"{key}: unknown key (allowed keys: job, join, watermark, emit, retention, output, state,"
        f" processing, kafka, spark, metrics){message}"
    ]


def test_unknown_keys_in_the_join_section_list_the_allowed_keys() -> None:
    doc = _join_doc(kindd="left")
    doc["join"]["left"]["tiemstamp_unit"] = "s"
    assert _join_problems(doc) == [
        "join.left.tiemstamp_unit: unknown key (allowed keys: name, topic, format, avro_schema,"
        " avro_wire, timestamp, timestamp_from, timestamp_unit, fields); did you mean"
        " 'timestamp_unit'?",
        "join.kindd: unknown key (allowed keys: left, right, on, kind, range, between, rows,"
        " store); did you mean 'kind'?",
    ]


def test_avro_schema_problems_of_a_join_side_name_its_format(tmp_path: Path) -> None:
    (tmp_path / "e.avsc").write_text("{}", encoding="utf-8")
    doc = _join_doc()
    doc["join"]["right"]["format"] = "avro"
    doc["join"]["left"]["avro_schema"] = "e.avsc"
    with pytest.raises(ConfigError) as err:
        parse_any_config(doc, base_dir=tmp_path)
    assert [str(problem) for problem in err.value.problems] == [
        "join.left.avro_schema: only allowed when join.left.format is avro"
        " (join.left.format is json)",
        "join.right.avro_schema: required when join.right.format is avro: the path of the Avro"
        " schema (.avsc), relative to the job file",
    ]


def test_a_join_sides_name_is_its_topic_without_topic() -> None:
    doc = _join_doc()
    doc["join"]["left"]["name"] = "my orders"
    assert _join_problems(doc) == [
        "join.left.name: is the topic too when join.left.topic is not set: must be a Kafka topic"
        " name: 1 to 249 letters, digits, '.', '_' or '-' (got 'my orders')"
    ]
    doc["join"]["left"]["topic"] = "orders"
    config = parse_any_config(doc, base_dir=ROOT)
    assert isinstance(config, JoinJobConfig)
    assert (config.join.left.name, config.join.left.topic_name) == ("my orders", "orders")


def test_retention_size_is_refused_for_a_join() -> None:
    """It had no effect, silently."""
    doc = _join_doc() | {"retention": {"time": "1h", "size": 3}}
    assert _join_problems(doc) == [
        "retention.size: does not apply to joins: their messages are kept for retention.time"
    ]


def test_a_join_writes_no_topic_it_reads() -> None:
    """A side without ``topic`` reads its ``name``: the problem names the field set.
    Both sides may read one topic (a self-join)."""
    doc = _join_doc() | {"output": {"topic": "orders", "errors_topic": "t"}}
    doc["join"]["right"]["topic"] = "t"
    assert _join_problems(doc) == [
        "output.topic: 'orders' is the job's input (join.left.name) too: it would read its "
        "own results again",
        "output.errors_topic: 't' is the job's input (join.right.topic) too: it would read "
        "its own error records again",
    ]
    doc = _join_doc()
    doc["join"]["right"]["topic"] = "orders"
    config = parse_any_config(doc, base_dir=ROOT)
    assert isinstance(config, JoinJobConfig)
    assert config.join.left.topic_name == config.join.right.topic_name == "orders"


def test_an_emit_section_given_for_a_join_is_named_as_ignored() -> None:
    join = {
        "job": "oj",
        "join": {
            "left": {"name": "a", "timestamp": "t"},
            "right": {"name": "b", "timestamp": "t"},
            "on": ["id"],
            "range": "1m",
        },
    }
    config = parse_any_config({**join, "emit": {"early": "1s", "late": "off"}}, base_dir=ROOT)
    assert [line.split(" ", 1)[0] for line in config.ignored_settings()] == [
        "emit.early",
        "emit.late",
    ]
    assert parse_any_config(join, base_dir=ROOT).ignored_settings() == []


def test_a_join_field_listed_twice_is_a_problem() -> None:
    """As a key field listed twice is (it was accepted, and joined on the field once)."""
    join = {
        "left": {"name": "a", "timestamp": "t"},
        "right": {"name": "b", "timestamp": "t"},
        "on": ["id", "id", "x"],
        "range": "1m",
    }
    with pytest.raises(ConfigError, match=r"join\.on: 'id' listed twice"):
        parse_any_config({"job": "oj", "join": join}, base_dir=ROOT)


def test_a_bad_signed_duration_is_shown_as_written() -> None:
    """The sign stays in the message: ``-2 minutes``, not ``2 minutes``."""
    assert _join_problems(_join_doc(range=None, between=["-2 minutes", "5m"])) == [
        "join.between.0: '-2 minutes' is not a duration: use a number with a unit, e.g. "
        "250ms, 30s, 5m, 1h, 1d"
    ]
