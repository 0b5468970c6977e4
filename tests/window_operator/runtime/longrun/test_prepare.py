"""What the driver of a long-running job works out before the workers start: the
starting offsets, kept from the job's first start, over a real broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from jobkit import add_partitions, create_topic, job_config, produce

from window_operator.kernel import InputPosition
from window_operator.runtime.longrun.prepare import StartingOffsetsError, worker_spec
from window_operator.runtime.settings import TaskSettings
from window_operator.spark.topics import prepare_topics

pytestmark = [pytest.mark.kafka]


def records(n: int) -> list[dict[str, object]]:
    return [{"page": "a", "ts": 1_000 + i, "latency_ms": 1.0} for i in range(n)]


def test_starting_offsets_are_kept_and_added_partitions_start_at_earliest(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("clicks")
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, records(10), round_robin=True, partitions=2)
    config = job_config(tmp_path, topic, unique_name("job"))
    tasks = prepare_topics(config, kafka_bootstrap)
    settings = TaskSettings(config, kafka_bootstrap, str(config.state.dir), tasks=tasks)
    checkpoint = tmp_path / "checkpoint"

    first = worker_spec(settings, 2, checkpoint_dir=checkpoint, starting_offsets="latest")
    assert first.first == {InputPosition(0, 0): 5, InputPosition(0, 1): 5}

    produce(kafka_bootstrap, topic, records(4), round_robin=True, partitions=2)
    add_partitions(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, [], raw=[(b"k", b"{}", 2)] * 3)
    again = worker_spec(settings, 2, checkpoint_dir=checkpoint, starting_offsets="latest")
    # kept from the first start; the added partition from its earliest offset, not latest
    assert again.first == {
        InputPosition(0, 0): 5,
        InputPosition(0, 1): 5,
        InputPosition(0, 2): 0,
    }
    assert again.latest[InputPosition(0, 2)] == 3
    assert {p.partition for p in again.assignment.partitions} == {0, 1, 2}

    with pytest.raises(StartingOffsetsError, match="expected earliest, latest or JSON"):
        worker_spec(settings, 2, checkpoint_dir=checkpoint, starting_offsets="{not json")
