"""The commit protocol of a state task: open and restore, log, commit, rebuild when ahead."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from helpers import runtime_for
from jobkit import create_topic

from stores.changelog import local_position
from stores.rocks import ColumnFamily, StoreBatch
from window_operator.runtime import commit
from window_operator.runtime.commit import TaskState, last_writer
from window_operator.runtime.producers import plain_producer
from window_operator.runtime.settings import TaskSettings
from window_operator.spark.topics import prepare_topics

pytestmark = pytest.mark.kafka


def settings(
    tmp_path: Path, bootstrap: str, unique_name: Callable[[str], str], state: str
) -> TaskSettings:
    topic = unique_name("in")
    create_topic(bootstrap, topic, 1)
    config = runtime_for(
        job=unique_name("job"),
        input={"topic": topic, "key": "k", "timestamp": "ts"},
        processing={"guarantee": "at_least_once"},
    ).config
    prepare_topics(config, bootstrap)
    return TaskSettings(config, bootstrap, str(tmp_path / state), tasks=1)


def log_one(state: TaskState, value: bytes, number: int) -> None:
    batch = StoreBatch()
    batch.put(ColumnFamily.WINDOW_META, b"k", value)
    batch.put(ColumnFamily.CHECKPOINT, b"checkpoint", b"%d" % number)
    producer = plain_producer(state.settings.producer_config())
    delivery = state.log(producer, batch, batch_number=number, offsets=[])
    state.commit(batch, delivery.marker_offset(producer.flush(30)), "writer-1")


def test_a_store_is_rebuilt_from_its_changelog_and_knows_its_last_writer(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    s = settings(tmp_path, kafka_bootstrap, unique_name, "a")
    state = TaskState.open(s, 0)
    log_one(state, b"v1", 1)
    log_one(state, b"v2", 2)
    assert last_writer(state.store) == "writer-1"
    position = local_position(state.store)
    state.close()
    # another host: an empty store catches up from the changelog
    other = TaskState.open(TaskSettings(s.config, s.bootstrap_servers, str(tmp_path / "b"), 1), 0)
    try:
        assert other.restored.applied == 4 and other.restored.batches == 2
        assert other.store.get(ColumnFamily.WINDOW_META, b"k") == b"v2"
        assert local_position(other.store) == position
        assert last_writer(other.store) is None  # local to the store that committed
    finally:
        other.close()


def test_a_store_ahead_of_its_changelog_is_rebuilt(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    s = settings(tmp_path, kafka_bootstrap, unique_name, "a")
    state = TaskState.open(s, 0)
    log_one(state, b"v1", 1)
    state.close()
    # the changelog topic is recreated (another run): the local store claims too much
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for f in admin.delete_topics([s.changelog_topic]).values():
        f.result(30)
    prepare_topics(s.config, kafka_bootstrap)
    again = TaskState.open(s, 0)
    try:
        assert again.store.get(ColumnFamily.WINDOW_META, b"k") is None
        assert local_position(again.store) == 0
    finally:
        again.close()


def test_a_store_whose_catch_up_starts_at_a_record_older_than_deletes_live_is_rebuilt(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compaction may remove a delete (tombstone) once it is older than the changelog's
    ``delete.retention.ms``: a store whose catch-up starts at a record older than half
    of that could miss one, and keep a key the job deleted. Such a store is rebuilt from
    the whole changelog, which holds every live key's latest value; a store behind by
    young records (a task moved, a batch retried) is caught up."""
    s = settings(tmp_path, kafka_bootstrap, unique_name, "a")
    retention = commit._delete_retention_ms(s)
    assert retention == commit.CHANGELOG_DELETE_RETENTION_MS  # set when the job made it
    state = TaskState.open(s, 0)
    log_one(state, b"v1", 1)
    state.close()
    # another host runs the task twice; the first store is left behind
    other = TaskState.open(TaskSettings(s.config, s.bootstrap_servers, str(tmp_path / "b"), 1), 0)
    log_one(other, b"v2", 2)
    log_one(other, b"v3", 3)
    other.close()
    recent = TaskState.open(s, 0)
    assert (recent.restored.batches, recent.store.get(ColumnFamily.WINDOW_META, b"k")) == (
        2,
        b"v3",
    )  # caught up: the two batches after its position
    recent.close()
    other = TaskState.open(TaskSettings(s.config, s.bootstrap_servers, str(tmp_path / "b"), 1), 0)
    log_one(other, b"v4", 4)
    other.close()
    # as if the changelog kept deletes 20 ms: batch 4, the first after the store's
    # position, is older than half of that by now
    key = (s.bootstrap_servers, s.changelog_topic)
    monkeypatch.setitem(commit._DELETE_RETENTION, key, 20)
    time.sleep(0.05)
    stale = TaskState.open(s, 0)
    try:
        assert stale.restored.batches == 4  # rebuilt: every batch of the changelog
        assert stale.store.get(ColumnFamily.WINDOW_META, b"k") == b"v4"
    finally:
        stale.close()


def test_a_task_that_skips_batch_numbers_still_compacts_what_it_deleted(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A task kept open counts the passes it did not commit too (they changed nothing),
    so the batch numbers it logs may skip every multiple of ``COMPACT_EVERY``: it
    compacts whenever a number passes one. Before, a task with records every other
    pass never compacted its deleted ranges off the disk."""
    state = TaskState.open(settings(tmp_path, kafka_bootstrap, unique_name, "a"), 0)
    producer = plain_producer(state.settings.producer_config())
    try:
        for number in range(1, commit.COMPACT_EVERY + 2, 2):  # 1, 3, ..., 15, 17
            batch = StoreBatch()
            batch.put(ColumnFamily.WINDOW_META, b"k%d" % number, b"v")
            batch.delete_range(ColumnFamily.WINDOW_META, b"a", b"k%d" % number)
            batch.put(ColumnFamily.CHECKPOINT, b"checkpoint", b"%d" % number)
            delivery = state.log(producer, batch, batch_number=number, offsets=[])
            state.commit(batch, delivery.marker_offset(producer.flush(30)))
            passed = number > commit.COMPACT_EVERY
            assert state.store.deleted_uncompacted is not passed, number
    finally:
        state.close()
