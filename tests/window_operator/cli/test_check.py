"""``window-operator check``: a job file checked as ``run`` checks it, without Kafka or
Spark, and what the job will do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from window_operator.cli import main

REPO = Path(__file__).resolve().parents[3]


def test_a_valid_job_says_what_it_reads_computes_and_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "--config", str(REPO / "config" / "clicks.yaml")]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "job clicks: valid",
        "  reads      clicks (json), key page, event time ts (ms)",
        "  windows    hopping size 1m step 10s",
        "  computes   clicks = count, mean_latency_ms = mean(latency_ms), max_latency_ms = "
        "max(latency_ms), p95_latency_ms = percentile(latency_ms)",
        "  emits      a window when it closes, LATE updates at most every 10s",
        "  lateness   5s, retention 1h",
        "  writes     results to clicks-windows (json), errors to clicks-errors, state "
        "changelog to clicks-state-changelog",
        "  runs       micro_batch on Spark, exactly_once, state in state/clicks (one state "
        "task per input partition)",
    ]


def test_a_join_and_a_window_by_arrival(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", str(REPO / "config" / "orders-shipments.yaml")]) == 0
    out = capsys.readouterr().out
    assert "  reads      orders <- orders (json, event time time (iso8601)), shipments <- " in out
    assert "  joins      inner on id, 0 <= right.ts - left.ts <= 2m\n" in out
    job = {
        "job": "last100",
        "input": {"topic": "ev", "key": ["country", "device"], "timestamp": "ts"},
        "window": {"type": "count", "size": 100, "step": 10},
        "aggregations": [{"name": "n", "op": "count"}],
        "emit": {"early": "5s"},
        "output": {"format": "avro"},
        "state": {"tasks": 8},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["check", "--config", str(tmp_path / "job.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "  reads      ev (json), key [country, device], event time ts (ms)"
    assert lines[2] == "  windows    count size 100 step 10"
    assert lines[4].endswith("a window when it closes, EARLY results every 5s while it is open")
    assert not any(line.startswith("  lateness") for line in lines)  # none by arrival
    assert "(avro, derived schema)" in lines[5] and "(8 state tasks)" in lines[6]


def test_a_join_side_without_a_topic_reads_the_topic_of_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = {
        "job": "j",
        "join": {
            "left": {"name": "orders", "timestamp": "t"},
            "right": {"name": "shipments", "topic": "ships", "timestamp": "t"},
            "on": ["id"],
            "between": ["-2m", "+5m"],
        },
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["check", "--config", str(tmp_path / "job.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "  reads      orders <- orders (json, event time t (ms)), shipments <- ships (json, "
        "event time t (ms))"
    )
    assert lines[2] == "  joins      inner on id, -2m <= right.ts - left.ts <= +5m"


def test_a_bad_job_is_refused_as_run_refuses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = {
        "job": "bad",
        "input": {"topic": "ev", "key": "k", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": "1m"},
        "aggregations": [{"name": "n", "op": "no_such_module:Op"}],
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["check", "--config", str(tmp_path / "job.yaml")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "aggregations.0.op" in captured.err and "Traceback" not in captured.err


def test_a_job_whose_state_an_earlier_run_kept_in_another_shape_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` refuses it at the start (exit 2): ``check`` says so before."""
    from window_operator.config import load_any_config
    from window_operator.runtime.kept_shape import ShapeKeeper, state_shape
    from window_operator.runtime.settings import TaskSettings

    job = {
        "job": "totals",
        "input": {"topic": "ev", "key": "k", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": "1m"},
        "aggregations": [{"name": "n", "op": "count"}],
        "spark": {"checkpoint_dir": str(tmp_path / "checkpoint")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    config = load_any_config(str(path))
    shape = state_shape(TaskSettings(config, "", str(tmp_path)))
    ShapeKeeper(tmp_path / "checkpoint", "totals", shape, tasks=1).committed_by([0])
    assert main(["check", "--config", str(path)]) == 0  # the shape it kept
    capsys.readouterr()
    path.write_text(yaml.safe_dump({**job, "window": {"type": "tumbling", "size": "5m"}}))
    assert main(["check", "--config", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("window-operator: job 'totals' keeps its state in another shape")
    assert "(size 60000, step 60000; this config has size 300000, step 300000;" in err


def test_a_field_name_with_a_dot_is_said_to_be_a_top_level_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``user.id`` reads a top-level field of that name, not ``id`` inside ``user``:
    every record of ``{"user": {"id": ...}}`` was a MISSING_KEY, and check said
    nothing (a walkthrough)."""
    job = {
        "job": "nested",
        "input": {"topic": "ev", "key": "user.id", "timestamp": "meta.ts"},
        "window": {"type": "tumbling", "size": "1m"},
        "aggregations": [{"name": "n", "op": "count"}, {"name": "s", "op": "sum", "field": "v"}],
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert main(["check", "--config", str(tmp_path / "job.yaml")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"window-operator: warning: {tmp_path / 'job.yaml'}: {setting} names the field "
        f"'{name}': a top-level field of that name (a dot does not reach into nested objects)"
        for setting, name in [("input.key", "user.id"), ("input.timestamp", "meta.ts")]
    ]
    join = {
        "job": "j",
        "join": {
            "left": {"name": "a", "timestamp": "ts"},
            "right": {"name": "b", "timestamp": "ts", "fields": ["x.y"]},
            "on": ["order.id"],
            "range": "1m",
        },
    }
    (tmp_path / "join.yaml").write_text(yaml.safe_dump(join))
    assert main(["check", "--config", str(tmp_path / "join.yaml")]) == 0
    err = capsys.readouterr().err
    assert "join.on names the field 'order.id'" in err
    assert "join.right.fields names the field 'x.y'" in err
    assert main(["check", "--config", str(REPO / "config" / "clicks.yaml")]) == 0
    assert capsys.readouterr().err == ""
