"""The shape of a job's state kept in its checkpoint directory
(:mod:`window_operator.runtime.kept_shape`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer
from helpers import runtime_for

from stores.changelog import changelog_key
from stores.rocks import ColumnFamily
from window_operator.errors import IncompatibleStateError
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel.checkpoint import CHECKPOINT_KEY, Checkpoint
from window_operator.runtime.kept_shape import (
    SHAPE_FILE,
    ShapeKeeper,
    check_changelog_shape,
    check_kept_shape,
    kept_shape,
    state_shape,
)
from window_operator.runtime.settings import TaskSettings


def shape_of(tmp_path: Path, **overrides: object) -> dict[str, object]:
    config = runtime_for(**overrides).config
    return dict(state_shape(TaskSettings(config, "", str(tmp_path / "state"))))


def test_the_shape_is_the_operator_s_and_names_what_the_state_lays_out(tmp_path: Path) -> None:
    shape = shape_of(tmp_path)
    resized = shape_of(tmp_path, window={"type": "tumbling", "size": "5m"})
    assert shape["type"] == "time" and resized["type"] == "time"
    assert resized["size"] == 300_000 and resized != shape
    # what does not touch the layout leaves it as it is
    assert shape_of(tmp_path, watermark={"allowed_lateness": "1h"}) == shape


def test_a_shape_is_kept_once_every_task_committed_with_it(tmp_path: Path) -> None:
    shape = shape_of(tmp_path)
    keeper = ShapeKeeper(tmp_path, "clicks", shape, tasks=3)
    keeper.committed_by([0, 2])
    assert kept_shape(tmp_path, "clicks") is None  # task 1's store may hold another
    keeper.committed_by([2, 1])
    assert kept_shape(tmp_path, "clicks") == shape
    check_kept_shape(tmp_path, "clicks", shape)  # the same shape: taken


def test_another_shape_is_refused_naming_both(tmp_path: Path) -> None:
    ShapeKeeper(tmp_path, "clicks", shape_of(tmp_path), tasks=1).committed_by([0])
    summed = [{"name": "clicks", "op": "count"}, {"name": "total", "op": "sum", "field": "v"}]
    with pytest.raises(IncompatibleStateError) as refused:
        check_kept_shape(tmp_path, "clicks", shape_of(tmp_path, aggregations=summed))
    said = str(refused.value)
    assert said.startswith("job 'clicks' keeps its state in another shape (aggregations [")
    assert '; this config has aggregations [["count",null,null],["sum","v",null]]' in said
    assert f"kept in {tmp_path / SHAPE_FILE}" in said
    assert "start the job afresh (another job name, or delete the job's changelog topic" in said


def test_a_job_of_another_name_or_a_file_that_does_not_read_is_not_compared(
    tmp_path: Path,
) -> None:
    shape = shape_of(tmp_path)
    other = shape_of(tmp_path, window={"type": "tumbling", "size": "5m"})
    ShapeKeeper(tmp_path, "clicks", shape, tasks=1).committed_by([0])
    check_kept_shape(tmp_path, "renamed", other)  # a job started afresh under a new name
    (tmp_path / SHAPE_FILE).write_text("{not json")
    check_kept_shape(tmp_path, "clicks", other)
    (tmp_path / SHAPE_FILE).write_text(json.dumps(["clicks"]))
    assert kept_shape(tmp_path, "clicks") is None


def test_a_join_of_another_shape_is_refused_for_its_stored_messages(tmp_path: Path) -> None:
    """A join keeps messages, not accumulators: the line said "its stored accumulators
    cannot be continued" of a join whose kind or time condition changed."""
    from window_operator.config import parse_any_config

    def join_shape(kind: str) -> dict[str, object]:
        doc = {
            "job": "j",
            "join": {"left": {"name": "l", "timestamp": "ts"},
                     "right": {"name": "r", "timestamp": "ts"},
                     "on": ["k"], "range": "2m", "kind": kind},
            "state": {"dir": str(tmp_path / "state")},
        }  # fmt: skip
        config = parse_any_config(doc, base_dir=tmp_path)
        return dict(state_shape(TaskSettings(config, "", str(tmp_path / "state"))))

    ShapeKeeper(tmp_path, "j", join_shape("full"), tasks=1).committed_by([0])
    with pytest.raises(IncompatibleStateError) as refused:
        check_kept_shape(tmp_path, "j", join_shape("inner"))
    said = str(refused.value)
    assert 'kind "full"; this config has kind "inner"' in said
    assert "its stored messages cannot be continued" in said


@pytest.mark.kafka
def test_a_new_checkpoint_directory_over_a_changelog_of_another_shape_is_refused(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another state.dir and spark.checkpoint_dir restore the state the changelog holds:
    the driver compares the shape of its last checkpoint before Spark runs anything.
    Before, each state task refused it after four tries and a thousand lines of
    tracebacks (a walkthrough's new aggregation); a changed input topic was not refused
    at all. Taken, a state continued from a new checkpoint directory is warned of."""
    job = unique_name("job")
    config = runtime_for(job=job, input={"key": "k", "timestamp": "ts", "topic": "a"}).config
    settings = replace(TaskSettings(config, kafka_bootstrap, str(tmp_path / "state")), tasks=2)
    KafkaAdmin(kafka_bootstrap).create_topic(
        settings.changelog_topic, 2, {"cleanup.policy": "compact"}
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    shape = shape_of(tmp_path, job=job, input={"key": "k", "timestamp": "ts", "topic": "a"})
    key = changelog_key(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY)
    producer.produce(settings.changelog_topic, key=b"\x01k", value=b"v", partition=1)
    written = Checkpoint(shape, inputs=["a"]).encode()  # as the operator writes it
    producer.produce(settings.changelog_topic, key=key, value=written, partition=1)
    producer.flush(10)
    with caplog.at_level(logging.WARNING):
        check_changelog_shape(settings, tmp_path / "new", shape)  # partition 0 is empty
    assert "holds the state of an earlier run, which this run continues" in caplog.text
    moved = replace(
        settings,
        config=runtime_for(job=job, input={"key": "k", "timestamp": "ts", "topic": "b"}).config,
    )
    with pytest.raises(IncompatibleStateError) as refused:
        check_changelog_shape(moved, tmp_path / "new", state_shape(moved))
    said = str(refused.value)
    assert 'holds a state that read input topics ["a"], where this config reads ["b"]' in said
    assert "(the last checkpoint of task 1;" in said and "\n" not in said
    # a checkpoint directory that kept the shape is compared by check_kept_shape alone
    ShapeKeeper(tmp_path / "kept", job, shape, tasks=1).committed_by([0])
    check_changelog_shape(moved, tmp_path / "kept", state_shape(moved))


@pytest.mark.kafka
def test_a_checkpoint_directory_of_an_earlier_version_is_not_called_new(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job that ran before the start file was kept (Spark's offset log, no start file):
    its changelog's state is its own, continued from the same checkpoint directory."""
    job = unique_name("job")
    config = runtime_for(job=job, input={"key": "k", "timestamp": "ts", "topic": "a"}).config
    settings = replace(TaskSettings(config, kafka_bootstrap, str(tmp_path / "state")), tasks=1)
    KafkaAdmin(kafka_bootstrap).create_topic(
        settings.changelog_topic, 1, {"cleanup.policy": "compact"}
    )
    shape = state_shape(settings)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    key = changelog_key(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY)
    producer.produce(settings.changelog_topic, key=key, value=Checkpoint(shape).encode())
    producer.flush(10)
    ran = tmp_path / "checkpoint"
    (ran / "offsets").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        check_changelog_shape(settings, ran, shape)
    assert "which this run continues" not in caplog.text


def test_a_broker_that_does_not_answer_is_asked_once(tmp_path: Path) -> None:
    """Each partition it cannot read waits 10 s: the check leaves the rest to the tasks
    at the first (before, 10 s for every state task before the job started)."""
    import time

    config = runtime_for(job="clicks").config
    settings = replace(TaskSettings(config, "127.0.0.1:1", str(tmp_path / "state")), tasks=4)
    t0 = time.monotonic()
    check_changelog_shape(settings, tmp_path / "checkpoint", state_shape(settings))
    assert time.monotonic() - t0 < 20
