"""The aggregation job root: frozen models, value_fields, aggregation names and ops."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from configkit import CONFIG_DIR, ROOT, minimal, one_problem, problem_lines
from pydantic import ValidationError

from window_operator.config import (
    AggregationConfig,
    ConfigError,
    ConfigProblem,
    JobConfig,
    TumblingWindow,
    load_config,
    parse_any_config,
    parse_config,
)
from window_operator.job import build_runtime


def test_models_are_frozen() -> None:
    cfg = parse_config(minimal(), base_dir=ROOT)
    with pytest.raises(ValidationError, match="frozen"):
        cfg.job = "other"
    with pytest.raises(ValidationError, match="frozen"):
        cfg.window.size = 1
    with pytest.raises(ValidationError, match="frozen"):
        cfg.aggregations[0].name = "m"
    assert isinstance(cfg.aggregations, tuple)
    assert hash(cfg.window) == hash(TumblingWindow(size=60_000))


def test_model_dump_validates_back_to_an_equal_config() -> None:
    cfg = load_config(CONFIG_DIR / "clicks.yaml")
    assert JobConfig.model_validate(cfg.model_dump()) == cfg


def test_value_fields_derived_in_order_without_repeats() -> None:
    doc = minimal() | {
        "aggregations": [
            {"name": "a", "op": "count"},
            {"name": "b", "op": "max", "field": "y"},
            {"name": "c", "op": "linreg", "field": "z", "params": {"x": "x"}},
            {"name": "d", "op": "min", "field": "y"},
            {"name": "e", "op": "linreg", "field": "x", "params": {"x": 3}},
            {"name": "f", "op": "other", "field": "w", "params": {"x": "not-a-field"}},
        ]
    }
    assert parse_config(doc, base_dir=ROOT).value_fields() == ("y", "z", "x", "w")


def test_value_fields_explicit() -> None:
    doc = minimal() | {"input": {"timestamp": "ts", "fields": ["b", "a", "b"]}}
    doc["aggregations"] = [{"name": "m", "op": "max", "field": "a"}]
    cfg = parse_config(doc, base_dir=ROOT)
    assert cfg.input.fields == ("b", "a", "b")
    assert cfg.value_fields() == ("b", "a")


def test_explicit_fields_must_cover_aggregation_fields() -> None:
    doc = minimal() | {"input": {"timestamp": "ts", "fields": ["a"]}}
    doc["aggregations"] = [
        {"name": "m", "op": "max", "field": "a"},
        {"name": "r", "op": "linreg", "field": "b", "params": {"x": "c"}},
    ]
    assert problem_lines(doc) == [
        "aggregations.1.field: 'b' is not one of input.fields (a)",
        "aggregations.1.params.x: 'c' is not one of input.fields (a)",
    ]


def test_duplicate_aggregation_names() -> None:
    doc = minimal()
    doc["aggregations"] = [
        {"name": "n", "op": "count"},
        {"name": "m", "op": "max", "field": "v"},
        {"name": "n", "op": "min", "field": "v"},
    ]
    assert one_problem(doc) == (
        "aggregations.2.name",
        "duplicate aggregation name 'n' (also used by aggregations.0); names must be unique",
    )


def test_op_is_not_checked_against_a_catalogue() -> None:
    doc = minimal()
    doc["aggregations"] = [
        {"name": "a", "op": "no_such_op"},
        {"name": "b", "op": "my.pkg:MyOp", "params": {"k": [1, 2]}},
        {"name": "c", "op": "my.pkg.MyOp", "params": None},
    ]
    aggs = parse_config(doc, base_dir=ROOT).aggregations
    assert [a.op for a in aggs] == ["no_such_op", "my.pkg:MyOp", "my.pkg.MyOp"]
    assert aggs[1] == AggregationConfig(name="b", op="my.pkg:MyOp", params={"k": [1, 2]})
    assert aggs[2].params == {}


_USER_OPS = """
class RaisingOp:
    def __init__(self):
        raise RuntimeError("no licence")

    def create(self): return 0
    def accumulate(self, acc, value): return acc
    def combine(self, a, b): return a
    def finish(self, acc): return acc


class KeyErrorOp(RaisingOp):
    def __init__(self, table=None):
        (table or {})["rate"]
"""


@pytest.mark.parametrize(
    ("module", "op", "path", "message"),
    [
        (
            _USER_OPS,
            "raising:RaisingOp",
            "aggregations.0.params",
            "op 'raising:RaisingOp': the constructor raised RuntimeError: no licence",
        ),
        (
            _USER_OPS,
            "raising:KeyErrorOp",
            "aggregations.0.params",
            "op 'raising:KeyErrorOp': the constructor raised KeyError: 'rate'",
        ),
        (
            "import sys\nsys.exit(3)\n",
            "exiting:Op",
            "aggregations.0.op",
            "op 'exiting:Op': cannot import module 'exiting': SystemExit: 3",
        ),
    ],
)
def test_a_user_op_failing_in_any_way_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, op: str, path: str, message: str
) -> None:
    """Only TypeError and ValueError from a constructor were; the rest was a traceback,
    and a module calling sys.exit ended the process without a word."""
    name = op.partition(":")[0]
    (tmp_path / f"{name}.py").write_text(module, encoding="utf-8")
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.delitem(sys.modules, name, raising=False)
    doc = minimal() | {"aggregations": [{"name": "n", "op": op}]}
    config = parse_config(doc, base_dir=ROOT)
    with pytest.raises(ConfigError) as info:
        build_runtime(config, source="job.yaml")
    assert info.value.problems == (ConfigProblem(path, message),)


@pytest.mark.parametrize(
    ("key", "fields"),
    [(None, ()), ("page", ("page",)), (["page"], ("page",)), (["a", "b"], ("a", "b"))],
)
def test_the_key_is_one_field_or_a_list_of_them(key: object, fields: tuple[str, ...]) -> None:
    doc = minimal()
    doc["input"] = {"timestamp": "ts", "key": key}
    assert parse_config(doc, base_dir=ROOT).input.key_fields == fields


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (5, "must be a field name or a list of field names (got 5)"),
        ({"a": 1}, "must be a field name or a list of field names (got a mapping)"),
        ("", "must not be empty (leave key out for one global key)"),
        ([], "list at least one field (or leave key out for one global key)"),
        (["a", 5], "item 1 must be a field name (got 5)"),
        (["a", ""], "item 1 must be a field name (got '')"),
        (["a", "b", "a"], "'a' listed twice"),
        ([f"f{i}" for i in range(17)], "at most 16 key fields (got 17)"),
    ],
)
def test_a_bad_key_is_one_problem_naming_it(key: object, message: str) -> None:
    doc = minimal()
    doc["input"] = {"timestamp": "ts", "key": key}
    assert one_problem(doc) == ("input.key", message)


@pytest.mark.parametrize("window", [{"type": "count", "size": 4}, {"type": "offsets", "size": 4}])
def test_time_settings_given_for_windows_of_messages_are_named_as_ignored(
    window: dict[str, object],
) -> None:
    """Count and offsets windows hold messages by number or offset: lateness, LATE
    updates and retention by time do not apply. A user was told nothing of it."""
    given = {
        "window": window,
        "watermark": {"allowed_lateness": "5s", "idle_timeout": "1m"},
        "emit": {"late": "off", "early": "1s"},
        "retention": {"time": "1h"},
    }
    ignored = parse_config({**minimal(), **given}, base_dir=ROOT).ignored_settings()
    named = [line.split(" ", 1)[0] for line in ignored]
    assert named == ["watermark.allowed_lateness", "emit.late", "retention.time"]
    assert all(f"does not apply to {window['type']} windows" in line for line in ignored)
    assert parse_config({**minimal(), "window": window}, base_dir=ROOT).ignored_settings() == []
    time_windows = {**given, "window": {"type": "tumbling", "size": "1m"}}
    assert parse_config({**minimal(), **time_windows}, base_dir=ROOT).ignored_settings() == []


def test_time_settings_given_for_tuple_sessions_are_named_as_ignored() -> None:
    """Tuple sessions end by their partition's offsets: lateness, LATE updates and
    retention by time change nothing (they were accepted silently). EARLY results of
    open sessions still go out, and the idle timeout and max_future still move and
    guard the job's watermark: those are not named."""
    tuple_sessions = {"type": "session", "max_idle_messages": 5}
    given = {
        "watermark": {"allowed_lateness": "5s", "idle_timeout": "1m", "max_future": "1h"},
        "emit": {"late": "per_arrival", "early": "1s"},
        "retention": {"time": "1h"},
    }
    doc = {**minimal(), **given, "window": tuple_sessions}
    ignored = parse_config(doc, base_dir=ROOT).ignored_settings()
    named = [line.split(" ", 1)[0] for line in ignored]
    assert named == ["watermark.allowed_lateness", "emit.late", "retention.time"]
    assert all(
        "does not apply to tuple sessions (window.max_idle_messages: a session holds a "
        "key's messages until 5 offsets of its partition pass without it; " in line
        for line in ignored
    )
    assert (
        parse_config({**minimal(), "window": tuple_sessions}, base_dir=ROOT).ignored_settings()
        == []
    )
    time_sessions = {**given, "window": {"type": "session", "gap": "10s"}}
    assert parse_config({**minimal(), **time_sessions}, base_dir=ROOT).ignored_settings() == []


def test_long_running_settings_and_a_json_inputs_avro_wire_are_named_as_ignored() -> None:
    """``spark.workers`` and ``spark.partition_discovery`` of a micro-batch job, and
    ``avro_wire`` of a JSON input, changed nothing without a word (a join's sides too)."""
    given = {
        "spark": {"workers": 2, "partition_discovery": "10s"},
        "input": {"timestamp": "ts", "avro_wire": "confluent"},
    }
    ignored = parse_config({**minimal(), **given}, base_dir=ROOT).ignored_settings()
    assert [line.split(" ", 1)[0] for line in ignored] == [
        "spark.workers",
        "spark.partition_discovery",
        "input.avro_wire",
    ]
    long_running = {**given, "spark": {**given["spark"], "mode": "long_running"}}
    ignored = parse_config({**minimal(), **long_running}, base_dir=ROOT).ignored_settings()
    assert ignored == ["input.avro_wire applies to format avro only (this input is json)"]
    sides = {"left": {"name": "a", "timestamp": "t", "avro_wire": "confluent"}}
    sides["right"] = {"name": "b", "timestamp": "t"}
    join = {"job": "oj", "join": {**sides, "on": ["id"], "range": "1m"}}
    assert [
        line.split(" ", 1)[0] for line in parse_any_config(join, base_dir=ROOT).ignored_settings()
    ] == ["join.left.avro_wire"]


def test_a_setting_given_its_default_is_not_named_as_ignored() -> None:
    """The README's reference writes ``workers: null``, ``partition_discovery: 1m`` and
    ``avro_wire: schemaless``: a copy of it gets no warning for settings that change
    nothing."""
    given = {
        "spark": {"workers": None, "partition_discovery": "1m"},
        "input": {"timestamp": "ts", "avro_wire": "schemaless"},
    }
    assert parse_config({**minimal(), **given}, base_dir=ROOT).ignored_settings() == []
