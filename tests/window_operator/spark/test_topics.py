"""Preparing a job's topics fixes its number of state tasks, and refuses what cannot run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers import runtime_for
from jobkit import add_partitions, create_topic

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
