"""The job's start: its input topics are those its positions are of."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from jobkit import create_topic, produce

from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputPartition
from window_operator.runtime.starts import (
    START_FILE,
    TOPIC_IDS_FILE,
    InputRecreatedError,
    InputTopicChangedError,
    StartingOffsetsError,
    check_input_topics,
    first_offsets,
)


def test_an_input_topic_created_again_stops_the_job_at_its_start(tmp_path: Path) -> None:
    """A topic deleted and created again with more records than the checkpoint's
    positions was read from those positions: the records below them were skipped without
    a word, and its partitions gone held the watermark back. Its Kafka id tells it."""
    check_input_topics(tmp_path, {"clicks": "id-1", "views": "id-2"})  # the first start
    check_input_topics(tmp_path, {"clicks": "id-1", "views": "id-2"})  # the same topics
    with pytest.raises(InputRecreatedError, match=r"input topic 'views' was deleted and created"):
        check_input_topics(tmp_path, {"clicks": "id-1", "views": "id-9"})
    # refused, it kept the ids it had: the next start is refused too
    with pytest.raises(InputRecreatedError):
        check_input_topics(tmp_path, {"clicks": "id-1", "views": "id-9"})


def test_ids_the_broker_does_not_give_are_not_judged(tmp_path: Path) -> None:
    """A broker without topic ids (Kafka before 2.8) gives none: nothing is kept or
    compared; a topic added to the job (a join's) has its id kept from then on."""
    check_input_topics(tmp_path, {})
    assert not (tmp_path / TOPIC_IDS_FILE).exists()
    check_input_topics(tmp_path, {"clicks": "id-1"})
    check_input_topics(tmp_path, {"views": "id-2"})  # clicks not answered this time
    with pytest.raises(InputRecreatedError, match="'clicks'"):
        check_input_topics(tmp_path, {"clicks": "id-3", "views": "id-2"})


def test_an_ids_file_that_does_not_read_is_written_again(tmp_path: Path) -> None:
    """(A raw JSONDecodeError stopped the start and ``status``.) The file can be deleted
    to take a new topic as it is, which the refusal says."""
    (tmp_path / TOPIC_IDS_FILE).write_text("{not json")
    check_input_topics(tmp_path, {"clicks": "id-1"})
    with pytest.raises(InputRecreatedError, match=rf"delete {tmp_path / TOPIC_IDS_FILE} to take"):
        check_input_topics(tmp_path, {"clicks": "id-2"})
    (tmp_path / TOPIC_IDS_FILE).unlink()
    check_input_topics(tmp_path, {"clicks": "id-2"})


@pytest.mark.kafka
def test_a_starting_offset_past_its_partition_s_end_is_refused(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """(It was kept, and the job read on from it once records came past it: the records
    written below it were never read.) The end itself is a start: what comes next."""
    topic = unique_name("start")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(10)])
    admin = KafkaAdmin(kafka_bootstrap)
    partitions = [InputPartition(0, topic, 0)]
    with pytest.raises(StartingOffsetsError, match=rf"give {topic}\[0\] offset 11, past the "):
        first_offsets(admin, partitions, tmp_path, json.dumps({topic: {"0": 11}}))
    assert not (tmp_path / START_FILE).exists()  # nothing kept: the next start asks again
    got = first_offsets(admin, partitions, tmp_path, json.dumps({topic: {"0": 10}}))
    assert got == {InputPosition(0, 0): 10}


@pytest.mark.kafka
def test_an_input_topic_renamed_in_the_config_stops_the_job_at_its_start(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """(``input.topic`` changed between runs: the state's positions, by input and
    partition, were taken as the new topic's, and its records below them skipped as
    replays without a word: a walkthrough lost 130 records a partition.) The start file
    names the topics the job began on; going back to the old topic is taken."""
    old, new = unique_name("clicks"), unique_name("clicks-v2")
    for topic in (old, new):
        create_topic(kafka_bootstrap, topic, 1)
    admin = KafkaAdmin(kafka_bootstrap)
    first_offsets(admin, [InputPartition(0, old, 0)], tmp_path, "earliest")
    with pytest.raises(
        InputTopicChangedError,
        match=rf"input topic '{new}' is not the one this job read before \('{old}'\)",
    ):
        first_offsets(admin, [InputPartition(0, new, 0)], tmp_path, "earliest")
    assert first_offsets(admin, [InputPartition(0, old, 0)], tmp_path, "earliest") == {
        InputPosition(0, 0): 0
    }
