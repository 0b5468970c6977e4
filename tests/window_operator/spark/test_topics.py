"""Preparing a job's topics fixes its number of state tasks, and refuses what cannot run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from helpers import runtime_for
from jobkit import add_partitions, create_topic

from window_operator.kafka_admin import KafkaAdmin
from window_operator.spark.topics import TaskCountError, prepare_topics

pytestmark = [pytest.mark.kafka]


def job(topic: str, name: str, **sections: Any) -> Any:
    return runtime_for(job=name, input={"topic": topic, "key": "k", "timestamp": "ts"}, **sections)


def test_the_changelog_fixes_the_task_count(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, name = unique_name("in"), unique_name("job")
    create_topic(kafka_bootstrap, topic, 3)
    assert prepare_topics(job(topic, name).config, kafka_bootstrap) == 3  # the default
    assert prepare_topics(job(topic, name).config, kafka_bootstrap) == 3
    with pytest.raises(TaskCountError, match="state.tasks is 5, but the changelog topic"):
        prepare_topics(job(topic, name, state={"tasks": 5}).config, kafka_bootstrap)


def test_offsets_windows_need_a_task_per_input_partition(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, name = unique_name("in"), unique_name("job")
    create_topic(kafka_bootstrap, topic, 3)
    window = {"type": "offsets", "size": 10}
    few = job(topic, name, window=window, state={"tasks": 2})
    with pytest.raises(TaskCountError, match="set state.tasks to at least 3"):
        prepare_topics(few.config, kafka_bootstrap)
    assert prepare_topics(job(topic, name, window=window).config, kafka_bootstrap) == 3
    # the input grows: the job's changelog keeps 3 tasks, which cannot hold 4 partitions
    add_partitions(kafka_bootstrap, topic, 4)
    with pytest.raises(TaskCountError, match="cannot take the new partitions. Start the job"):
        prepare_topics(job(topic, name, window=window).config, kafka_bootstrap)


def test_the_changelog_takes_large_state_values_and_keeps_deletes_a_day(
    kafka_bootstrap: str, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    """The job creates its changelog for records up to 32 MiB (values logged whole before
    values longer than 512 KiB were logged in parts), with deletes kept a day, which the
    restore's stale-store check reads back. A changelog made with Kafka's default 1 MB
    takes the parts: it is not warned of (before, it was, as a larger state value
    stopped the job)."""
    topic, name = unique_name("in"), unique_name("job")
    create_topic(kafka_bootstrap, topic, 1)
    prepare_topics(job(topic, name).config, kafka_bootstrap)
    made = KafkaAdmin(kafka_bootstrap).topic_config(f"{name}-state-changelog")
    assert (made["max.message.bytes"], made["delete.retention.ms"]) == ("33554432", "86400000")
    assert made["segment.ms"] == "3600000"  # compaction cleans closed segments only
    old = unique_name("old")
    KafkaAdmin(kafka_bootstrap).create_topic(f"{old}-state-changelog", 1, {})
    with caplog.at_level(logging.WARNING, logger="window_operator.spark.topics"):
        prepare_topics(job(topic, old).config, kafka_bootstrap)
    assert "max.message.bytes" not in caplog.text


def test_an_output_topic_deleted_between_runs_is_created_again_with_a_warning(
    kafka_bootstrap: str, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the restart made it again without a word (an operations walkthrough)."""
    topic, name = unique_name("in"), unique_name("job")
    create_topic(kafka_bootstrap, topic, 1)
    config = job(topic, name).config
    with caplog.at_level(logging.WARNING, logger="window_operator.spark.topics"):
        prepare_topics(config, kafka_bootstrap)  # the first start makes them: no warning
        assert not caplog.records
        admin = KafkaAdmin(kafka_bootstrap)
        for future in admin._client.delete_topics([config.output.topic]).values():
            future.result(30)
        prepare_topics(config, kafka_bootstrap)
    (warning,) = caplog.records
    assert f"topic {config.output.topic!r} of job {name!r} did not exist" in warning.getMessage()
