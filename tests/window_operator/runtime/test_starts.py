"""The job's start: its input topics are those its positions are of."""

from __future__ import annotations

from pathlib import Path

import pytest

from window_operator.runtime.starts import (
    TOPIC_IDS_FILE,
    InputRecreatedError,
    check_input_topics,
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
