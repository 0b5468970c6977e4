"""Job config: durations, the YAML schema, defaults and the error messages users see."""

from __future__ import annotations

import copy
import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from window_operator.config import (
    AggregationConfig,
    ConfigError,
    ConfigProblem,
    EmitConfig,
    HoppingWindow,
    JobConfig,
    LateEmit,
    TumblingWindow,
    load_config,
    parse_config,
)
from window_operator.durations import (
    MAX_DURATION_MS,
    Duration,
    DurationError,
    PositiveDuration,
    format_duration_ms,
    parse_duration_ms,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "config"


def minimal() -> dict[str, Any]:
    """The smallest valid job document."""
    return {
        "job": "j",
        "input": {"timestamp": "ts"},
        "window": {"type": "tumbling", "size": "1m"},
        "aggregations": [{"name": "n", "op": "count"}],
    }


def problem_lines(doc: dict[str, Any], base_dir: Path = ROOT) -> list[str]:
    """The problem lines of the ConfigError that ``doc`` raises (without the header)."""
    with pytest.raises(ConfigError) as info:
        parse_config(doc, base_dir=base_dir, source="job.yaml")
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid job config job.yaml:"
    assert all(line.startswith("  - ") for line in lines[1:])
    assert len(lines) == len(info.value.problems) + 1
    return [line[4:] for line in lines[1:]]


def one_problem(doc: dict[str, Any], base_dir: Path = ROOT) -> tuple[str, str]:
    """The (path, message) of the single problem ``doc`` has."""
    lines = problem_lines(doc, base_dir)
    assert len(lines) == 1, lines
    path, _, message = lines[0].partition(": ")
    return path, message


def write(directory: Path, text: str, name: str = "job.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------
# Durations
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        (0, 0),
        (250, 250),
        (1500.0, 1500),
        ("0s", 0),
        ("250", 250),
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("2d", 172_800_000),
        ("1h30m", 5_400_000),
        ("1h 30m", 5_400_000),
        (" 1m 30s ", 90_000),
        ("5 s", 5_000),
        ("1.5s", 1_500),
        (".5s", 500),
        ("0.25m", 15_000),
        ("1d2h3m4s5ms", 93_784_005),
        ("1s500ms", 1_500),
    ],
)
def test_parse_duration(text: int | float | str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("5x", "use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d"),
        ("", "use a number with a unit"),
        ("s", "use a number with a unit"),
        ("1h30", "use a number with a unit"),
        ("1 h x", "use a number with a unit"),
        ("5S", "use a number with a unit"),
        ("-5s", "cannot be negative"),
        (-1, "cannot be negative"),
        ("0.5ms", "not a whole number of milliseconds"),
        (1.5, "not a whole number of milliseconds"),
        (float("inf"), "use a number with a unit"),
        (True, "use a number with a unit"),
        ([1], "use a number with a unit"),
        (f"{MAX_DURATION_MS + 1}ms", "too long"),
    ],
)
def test_parse_duration_rejects(value: Any, reason: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration_ms(value)
    assert reason in str(info.value)
    assert str(info.value).startswith(repr(value))
    assert isinstance(info.value, ValueError)


def test_duration_error_message_is_exact() -> None:
    with pytest.raises(DurationError) as info:
        parse_duration_ms("5x")
    assert str(info.value) == (
        "'5x' is not a duration: use a number with a unit, e.g. 250ms, 30s, 5m, 1h, 1d"
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (1, "1ms"),
        (250, "250ms"),
        (1_000, "1s"),
        (1_500, "1s500ms"),
        (60_000, "1m"),
        (90_000, "1m30s"),
        (3_600_000, "1h"),
        (5_400_000, "1h30m"),
        (86_400_000, "1d"),
        (86_400_001, "1d1ms"),
        (93_784_005, "1d2h3m4s5ms"),
    ],
)
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text


@pytest.mark.parametrize("bad", [-1, True, 1.0])
def test_format_duration_rejects_non_durations(bad: Any) -> None:
    with pytest.raises(ValueError, match="non-negative int of milliseconds"):
        format_duration_ms(bad)


@given(st.integers(min_value=0, max_value=MAX_DURATION_MS))
def test_format_then_parse_round_trips(ms: int) -> None:
    text = format_duration_ms(ms)
    assert parse_duration_ms(text) == ms
    # Greedy decomposition: each unit appears at most once, largest first.
    assert format_duration_ms(parse_duration_ms(text)) == text


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(["ms", "s", "m", "h", "d"])),
        min_size=1,
        max_size=5,
    )
)
def test_parse_sums_parts(parts: list[tuple[int, str]]) -> None:
    unit_ms = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    text = " ".join(f"{n}{unit}" for n, unit in parts)
    assert parse_duration_ms(text) == sum(n * unit_ms[unit] for n, unit in parts)


class _Durations(BaseModel):
    any: Duration = 0
    positive: PositiveDuration = 1


def test_pydantic_duration_types() -> None:
    model = _Durations.model_validate({"any": "0s", "positive": "1m"})
    assert (model.any, model.positive) == (0, 60_000)
    with pytest.raises(ValidationError, match="is not a positive duration"):
        _Durations.model_validate({"positive": "0s"})
    with pytest.raises(ValidationError, match="'5x' is not a duration"):
        _Durations.model_validate({"any": "5x"})
    with pytest.raises(ValidationError, match="is not a duration"):
        _Durations.model_validate({"any": None})


# ---------------------------------------------------------------------------------------
# Example files
# ---------------------------------------------------------------------------------------


def test_clicks_example_loads() -> None:
    cfg = load_config(CONFIG_DIR / "clicks.yaml")
    assert cfg.job == "clicks"
    assert cfg.input.format == "json"
    assert cfg.input.key == "page"
    assert (cfg.input.timestamp, cfg.input.timestamp_unit) == ("ts", "ms")
    assert isinstance(cfg.window, HoppingWindow)
    assert (cfg.window.size, cfg.window.step) == (60_000, 10_000)
    assert [(a.name, a.op, a.field) for a in cfg.aggregations] == [
        ("clicks", "count", None),
        ("mean_latency_ms", "mean", "latency_ms"),
        ("max_latency_ms", "max", "latency_ms"),
        ("p95_latency_ms", "percentile", "latency_ms"),
    ]
    assert cfg.aggregations[3].params == {"q": 0.95}
    assert cfg.watermark.allowed_lateness == 5_000
    assert (cfg.emit.late_mode, cfg.emit.late_period_ms, cfg.emit.early_ms) == (
        "period",
        10_000,
        None,
    )
    assert cfg.retention.time == 3_600_000
    assert cfg.output.topic == "clicks-windows"
    assert cfg.output.errors_topic == "clicks-errors"
    assert cfg.value_fields() == ("latency_ms",)


def test_orders_max_example_loads() -> None:
    cfg = load_config(str(CONFIG_DIR / "orders-max.yaml"))
    assert cfg.input.key is None
    assert cfg.input.timestamp == "time"
    assert isinstance(cfg.window, TumblingWindow)
    assert (cfg.window.size, cfg.window.step) == (60_000, 60_000)
    assert [(a.name, a.op, a.field) for a in cfg.aggregations] == [("max_value", "max", "value")]
    assert cfg.watermark.allowed_lateness == 0
    assert (cfg.emit.late_mode, cfg.emit.late_period_ms) == ("per_arrival", 0)
    assert cfg.retention.time == 3_600_000
    assert cfg.value_fields() == ("value",)


# ---------------------------------------------------------------------------------------
# Defaults and the model surface
# ---------------------------------------------------------------------------------------


def test_defaults_are_as_documented() -> None:
    cfg = parse_config(minimal(), base_dir=ROOT)
    assert cfg.input.topic == "j-input"
    assert cfg.input.format == "json"
    assert cfg.input.avro_schema is None
    assert cfg.input.avro_wire == "schemaless"
    assert cfg.input.key is None
    assert cfg.input.timestamp_unit == "ms"
    assert cfg.input.fields is None
    assert cfg.aggregations[0].field is None
    assert cfg.aggregations[0].params == {}
    assert cfg.watermark.allowed_lateness == 0
    assert cfg.watermark.idle_timeout is None
    assert cfg.emit.early is None
    assert cfg.emit.late == LateEmit(mode="period", period_ms=10_000)
    assert cfg.retention.time == 3_600_000
    assert cfg.retention.size is None
    assert cfg.output.topic == "j-windows"
    assert cfg.output.format == "json"
    assert cfg.output.avro_schema is None
    assert cfg.output.errors_topic == "j-errors"
    assert cfg.state.dir == Path("./state")
    assert cfg.kafka.bootstrap_servers is None
    assert (cfg.kafka.consumer, cfg.kafka.producer) == ({}, {})
    assert cfg.spark.master is None
    assert cfg.spark.trigger == 5_000
    assert cfg.spark.max_offsets_per_trigger is None
    assert cfg.spark.checkpoint_dir == Path("state/j/spark-checkpoint")
    assert cfg.spark.conf == {}


def test_null_sections_take_defaults() -> None:
    doc = minimal()
    for section in ("watermark", "emit", "retention", "output", "state", "kafka", "spark"):
        doc[section] = None
    assert parse_config(doc, base_dir=ROOT) == parse_config(minimal(), base_dir=ROOT)


def test_checkpoint_dir_follows_state_dir_and_can_be_set() -> None:
    doc = minimal() | {"state": {"dir": "/var/lib/wo"}}
    assert parse_config(doc, base_dir=ROOT).spark.checkpoint_dir == Path(
        "/var/lib/wo/j/spark-checkpoint"
    )
    doc["spark"] = {"checkpoint_dir": "ckpt"}
    assert parse_config(doc, base_dir=ROOT).spark.checkpoint_dir == Path("ckpt")


def test_state_dir_is_not_resolved_against_the_yaml(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        job: j
        input: {timestamp: ts}
        window: {type: tumbling, size: 1m}
        aggregations: [{name: n, op: count}]
        state: {dir: data/state}
        """,
    )
    assert load_config(path).state.dir == Path("data/state")


def test_duration_fields_are_milliseconds_with_ms_properties() -> None:
    doc = minimal() | {
        "window": {"type": "hopping", "size": "1m", "step": "15s"},
        "watermark": {"allowed_lateness": "2s", "idle_timeout": "30s"},
        "emit": {"early": "5s", "late": "1m"},
        "retention": {"time": "2h", "size": 100},
        "spark": {"trigger": 2500},
    }
    cfg = parse_config(doc, base_dir=ROOT)
    assert (cfg.window.size, cfg.window.size_ms) == (60_000, 60_000)
    assert (cfg.window.step, cfg.window.step_ms) == (15_000, 15_000)
    assert cfg.watermark.allowed_lateness_ms == 2_000
    assert cfg.watermark.idle_timeout_ms == 30_000
    assert (cfg.emit.early, cfg.emit.early_ms) == (5_000, 5_000)
    assert (cfg.emit.late_mode, cfg.emit.late_period_ms) == ("period", 60_000)
    assert (cfg.retention.time_ms, cfg.retention.size) == (7_200_000, 100)
    assert (cfg.spark.trigger_ms, cfg.spark.available_now) == (2_500, False)


def test_tumbling_step_equals_size() -> None:
    window = TumblingWindow(size=30_000)
    assert window.step == window.size == 30_000
    assert window.step_ms == 30_000


@pytest.mark.parametrize(
    ("late", "mode", "period"),
    [
        ("10s", "period", 10_000),
        (250, "period", 250),
        ("per_arrival", "per_arrival", 0),
        ("off", "off", 0),
        (False, "off", 0),  # YAML 1.1 reads a bare `off` as false
    ],
)
def test_emit_late_forms(late: Any, mode: str, period: int) -> None:
    cfg = parse_config(minimal() | {"emit": {"late": late}}, base_dir=ROOT)
    assert (cfg.emit.late_mode, cfg.emit.late_period_ms) == (mode, period)


def test_bare_off_in_yaml_disables_early_and_late(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        job: j
        input: {timestamp: ts}
        window: {type: tumbling, size: 1m}
        aggregations: [{name: n, op: count}]
        watermark: {idle_timeout: off}
        emit:
          early: off
          late: off
        """,
    )
    cfg = load_config(path)
    assert cfg.emit == EmitConfig(early=None, late=LateEmit(mode="off", period_ms=0))
    assert cfg.watermark.idle_timeout is None


def test_spark_trigger_available_now_and_settings() -> None:
    doc = minimal() | {
        "spark": {"trigger": "available_now", "conf": {"a.b": 4, "c": True, "d": "x"}},
        "kafka": {"consumer": {"fetch.min.bytes": 1, "enable.auto.commit": False, "x": "y"}},
    }
    cfg = parse_config(doc, base_dir=ROOT)
    assert (cfg.spark.trigger, cfg.spark.trigger_ms, cfg.spark.available_now) == (
        "available_now",
        None,
        True,
    )
    assert cfg.spark.conf == {"a.b": "4", "c": "true", "d": "x"}
    assert cfg.kafka.consumer == {"fetch.min.bytes": 1, "enable.auto.commit": False, "x": "y"}


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


# ---------------------------------------------------------------------------------------
# value_fields
# ---------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


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
            " emit, retention, output, state, kafka, spark); did you mean 'window'?",
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
            "required key is missing",
            id="missing-nested",
        ),
        pytest.param(lambda d: d.pop("input"), "input", "required key is missing", id="missing"),
        pytest.param(
            lambda d: d["input"].update(tiemstamp="t"),
            "input.tiemstamp",
            "unknown key (allowed keys: topic, format, avro_schema, avro_wire, key, timestamp,"
            " timestamp_unit, fields); did you mean 'timestamp'?",
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
    ],
)
def test_error_names_field_and_allowed_values(mutate: Any, path: str, message: str) -> None:
    doc = copy.deepcopy(minimal())
    mutate(doc)
    assert one_problem(doc) == (path, message)


def test_invalid_job_name_is_reported_once() -> None:
    # The derived topic names must not repeat the job name's problem.
    lines = problem_lines(minimal() | {"job": "my job"})
    assert len(lines) == 1
    assert lines[0].startswith("job: ")


def test_every_problem_is_listed() -> None:
    doc = minimal()
    doc["window"]["size"] = "5x"
    doc["aggregations"].append({"name": "n", "op": "max", "field": "v"})
    doc["emit"] = {"late": "never"}
    doc["kafka"] = {"bootstrap": "x"}
    paths = [line.partition(": ")[0] for line in problem_lines(doc)]
    assert paths == ["window.size", "aggregations.1.name", "emit.late", "kafka.bootstrap"]


@pytest.mark.parametrize(
    ("size", "step"),
    [("25s", "10s"), ("5s", "10s"), ("1m", "7s")],
)
def test_hopping_size_must_be_multiple_of_step(size: str, step: str) -> None:
    doc = minimal() | {"window": {"type": "hopping", "size": size, "step": step}}
    path, message = one_problem(doc)
    assert path == "window.size"
    assert message.startswith("must be a positive multiple of window.step")
    assert f"size {size}, step {step}" in message


def test_hopping_size_equal_to_step_is_allowed() -> None:
    doc = minimal() | {"window": {"type": "hopping", "size": "10s", "step": "10s"}}
    window = parse_config(doc, base_dir=ROOT).window
    assert window == HoppingWindow(size=10_000, step=10_000)


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


@pytest.mark.parametrize("name", ["key", "window_start", "window_end", "kind", "update_seq"])
def test_reserved_aggregation_names(name: str) -> None:
    doc = minimal()
    doc["aggregations"] = [{"name": name, "op": "count"}]
    path, message = one_problem(doc)
    assert path == "aggregations.0.name"
    assert message.startswith(f"{name!r} is reserved for the window result")


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


# ---------------------------------------------------------------------------------------
# Avro schemas
# ---------------------------------------------------------------------------------------


def test_avro_input_requires_schema() -> None:
    doc = minimal()
    doc["input"]["format"] = "avro"
    path, message = one_problem(doc)
    assert path == "input.avro_schema"
    assert message.startswith("required when input.format is avro")


def test_avro_schema_file_must_exist(tmp_path: Path) -> None:
    doc = minimal()
    doc["input"] |= {"format": "avro", "avro_schema": "schemas/missing.avsc"}
    path, message = one_problem(doc, base_dir=tmp_path)
    assert path == "input.avro_schema"
    assert message.startswith(f"file not found: {tmp_path / 'schemas' / 'missing.avsc'}")


def test_avro_schema_must_be_a_file(tmp_path: Path) -> None:
    doc = minimal()
    (tmp_path / "schemas").mkdir()
    doc["input"] |= {"format": "avro", "avro_schema": "schemas"}
    assert one_problem(doc, base_dir=tmp_path) == (
        "input.avro_schema",
        f"not a file: {tmp_path / 'schemas'}",
    )


def test_avro_schema_resolved_against_the_yaml_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    (jobs / "schemas").mkdir(parents=True)
    (jobs / "schemas" / "click.avsc").write_text('{"type": "record"}', encoding="utf-8")
    (jobs / "out.avsc").write_text('{"type": "record"}', encoding="utf-8")
    write(
        jobs,
        """\
        job: j
        input:
          format: avro
          avro_schema: schemas/click.avsc
          avro_wire: confluent
          timestamp: ts
        window: {type: tumbling, size: 1m}
        aggregations: [{name: n, op: count}]
        output: {format: avro, avro_schema: ../jobs/out.avsc}
        """,
    )
    monkeypatch.chdir(tmp_path)  # relative to the YAML, not to the working directory
    cfg = load_config("jobs/job.yaml")
    assert cfg.input.avro_schema == jobs / "schemas" / "click.avsc"
    assert cfg.input.avro_schema.is_absolute()
    assert cfg.input.avro_wire == "confluent"
    assert cfg.output.avro_schema == jobs / "out.avsc"


def test_avro_schema_only_with_avro_format(tmp_path: Path) -> None:
    (tmp_path / "s.avsc").write_text("{}", encoding="utf-8")
    doc = minimal()
    doc["input"]["avro_schema"] = "s.avsc"
    doc["output"] = {"avro_schema": "s.avsc"}
    assert problem_lines(doc, base_dir=tmp_path) == [
        "input.avro_schema: only allowed when input.format is avro (input.format is json)",
        "output.avro_schema: only allowed when output.format is avro (output.format is json)",
    ]


def test_avro_output_without_schema_is_allowed() -> None:
    cfg = parse_config(minimal() | {"output": {"format": "avro"}}, base_dir=ROOT)
    assert (cfg.output.format, cfg.output.avro_schema) == ("avro", None)


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"invalid job config {path}:\n  - file not found: {path}"


def test_directory_is_not_a_job_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_yaml_syntax_error_names_path_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "job: j\ninput:\n  timestamp: ts\n   key: [\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    header, line = str(info.value).splitlines()
    assert header == f"invalid job config {path}:"
    assert line.startswith("  - line 4, column 7: YAML syntax error: ")


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "job: j\nwindow: {type: tumbling, size: 1m}\njob: k\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == (
        ConfigProblem("", "line 3, column 1: found duplicate key 'job' (first at line 1)"),
    )


def test_yaml_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        job: j
        input: {timestamp: ts}
        window: {type: tumbling, size: 1m}
        aggregations:
          - &max {name: a, op: max, field: v}
          - <<: *max
            name: b
        """,
    )
    assert [a.name for a in load_config(path).aggregations] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "got"), [("- a\n- b\n", "a list"), ("just text\n", "'just text'")]
)
def test_document_must_be_a_mapping(tmp_path: Path, text: str, got: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.path == ""
    assert problem.message.startswith("expected a mapping with the keys job, input, window")
    assert problem.message.endswith(f"(got {got})")


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the file is empty"):
        load_config(write(tmp_path, "# nothing\n"))


def test_parse_config_rejects_non_mapping() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(["job"], base_dir=ROOT)  # type: ignore[arg-type]
    assert str(info.value).startswith("invalid job config:\n  - expected a mapping")


def test_config_error_pickles() -> None:
    error = ConfigError("a.yaml", [ConfigProblem("job", "required key is missing")])
    copied = pickle.loads(pickle.dumps(error))
    assert (
        str(copied) == str(error) == "invalid job config a.yaml:\n  - job: required key is missing"
    )
    assert copied.problems == error.problems


def test_join_job_config_with_a_bare_yaml_on_key(tmp_path: Path) -> None:
    from window_operator.config import JoinJobConfig, load_any_config

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
    from window_operator.config import ConfigError, parse_any_config

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
