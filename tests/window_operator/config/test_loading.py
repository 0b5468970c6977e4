"""Loading job files: the examples, unreadable files, YAML problems, non-mapping documents."""

from __future__ import annotations

from pathlib import Path

import pytest
from configkit import CONFIG_DIR, ROOT, write

from window_operator.config import (
    ConfigError,
    ConfigProblem,
    HoppingWindow,
    TumblingWindow,
    load_any_config,
    load_config,
    parse_config,
)
from window_operator.job import build_runtime


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


def test_a_character_yaml_does_not_allow_is_one_line_naming_where(tmp_path: Path) -> None:
    """Before, a second line said ``in "<unicode string>", position 12``."""
    path = write(tmp_path, "job: j\ninput: {key: k\x00}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == (
        ConfigProblem(
            "",
            "line 2, column 15: unacceptable character #x0000: special characters are not allowed",
        ),
    )


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "job: j\nwindow: {type: tumbling, size: 1m}\njob: k\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == (
        ConfigProblem("", "line 3, column 1: found duplicate key 'job' (first at line 1)"),
    )


_JOB = """\
job: j
input: {{topic: clicks, key: page, timestamp: ts}}
window: {{type: tumbling, size: {size}}}
aggregations: [{{name: n, op: count}}]
"""


@pytest.mark.parametrize("size", ["1:30", "010", "0x10", "0b10", "1:30.5"])
def test_a_yaml_1_1_number_in_another_base_is_refused(tmp_path: Path, size: str) -> None:
    """YAML 1.1 reads ``1:30`` as 90 (base 60), ``010`` as 8, ``0x10`` as 16: a window of
    90 ms where 1 min 30 s was meant, without a word."""
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, _JOB.format(size=size)))
    (problem,) = info.value.problems
    assert problem.path == ""  # the file's: the loader refuses it, whatever the field
    assert problem.message == (
        f"line 3, column 32: {size} is a YAML 1.1 number in another base than ten (1:30 is "
        "90, 010 is 8): write it in decimal digits, with a unit for a duration (1m30s), or "
        "quote it"
    )
    for decimal, ms in (("90000", 90_000), ("1_000", 1_000), ("+5", 5), ("'010'", 10)):
        assert load_config(write(tmp_path, _JOB.format(size=decimal))).window.size_ms == ms


def test_a_key_yaml_1_1_reads_as_a_boolean_is_its_text(tmp_path: Path) -> None:
    """A join's ``on:`` is the boolean true to YAML 1.1, and was taken as ``on``: so were
    ``yes:`` and ``true:``, and ``on:`` beside ``'on':`` gave ``join.true: keys should be
    strings``."""
    text = (CONFIG_DIR / "orders-shipments.yaml").read_text()
    assert "\n  on: " in text
    assert load_any_config(write(tmp_path, text)) is not None
    for other in ("yes", "true", "On"):
        with pytest.raises(ConfigError) as info:
            load_any_config(write(tmp_path, text.replace("\n  on: ", f"\n  {other}: ")))
        assert [p.path for p in info.value.problems] == [f"join.{other}"]
        assert info.value.problems[0].message.startswith("unknown key")
    both = text.replace("\n  on: [id]", "\n  on: [id]\n  'on': [id]")
    with pytest.raises(ConfigError, match="found duplicate key 'on'"):
        load_any_config(write(tmp_path, both))


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


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "job: j\nwindow: {type: count, size: " + "9" * 5000 + "}\n",
            "line 2, column 29: an integer of 5000 digits is too long (at most 4300)",
        ),
        ("job: " + "[" * 3000 + "\n", "line 1, column 105: nested more than 100 levels deep"),
        (
            "job: j\nkafka: " + "{a: " * 200 + "\n",
            "line 2, column 401: nested more than 100 levels deep",
        ),
    ],
)
def test_yaml_the_parser_cannot_take_is_a_config_error(
    tmp_path: Path, text: str, problem: str
) -> None:
    """A ValueError (int digits limit) or a RecursionError escaped as a traceback."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path)
    assert info.value.problems == (ConfigProblem("", problem),)


def test_a_join_job_given_to_the_window_job_loader_says_which_loader_takes_it() -> None:
    """``load_config`` is the window jobs' loader: a join job's file is one problem
    naming ``join`` and the calls that take it (a user walkthrough got the four
    unknown and missing keys of a window job instead), and ``build_runtime`` refuses
    a join job's config by name instead of failing on a missing attribute."""
    path = ROOT / "config" / "orders-shipments.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [(p.path, p.message) for p in info.value.problems] == [
        (
            "join",
            "a join job: load it with load_any_config (or parse_any_config), and build its "
            "runtime with window_operator.join.build_join_runtime",
        )
    ]
    with pytest.raises(TypeError, match="build a join job with .*build_join_runtime"):
        build_runtime(load_any_config(path))  # type: ignore[arg-type]
