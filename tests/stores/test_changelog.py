"""Changelog writer and restorer against a real broker and real RocksDB."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from stores.changelog import (
    CF_TAGS,
    LOCAL_POSITION_KEY,
    ChangelogWriter,
    local_position,
    restore_from_changelog,
    set_local_position,
)
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.kafka_admin import KafkaAdmin

pytestmark = pytest.mark.kafka


def make_topic(bootstrap: str, name: str, partitions: int = 2) -> str:
    KafkaAdmin(bootstrap).create_topic(
        name, partitions, {"cleanup.policy": "compact", "retention.ms": "-1"}
    )
    return name


def dump(store: TaskStore) -> dict[ColumnFamily, list[tuple[bytes, bytes]]]:
    out = {}
    for cf in ColumnFamily:
        out[cf] = [
            (k, v)
            for k, v in store.scan(cf, b"")
            if not (cf is ColumnFamily.CHECKPOINT and k == LOCAL_POSITION_KEY)
        ]
    return out


def commit_logged(store: TaskStore, writer: ChangelogWriter, batch: StoreBatch, number: int) -> int:
    batch.put(ColumnFamily.CHECKPOINT, b"task", b"checkpoint-%d" % number)
    offsets = {(0, 0): number}.items()
    marker = writer.wait(writer.write(batch, store, batch_number=number, source_offsets=offsets))
    set_local_position(batch, marker + 1)
    store.commit(batch)
    return marker


def test_restore_into_an_empty_store_is_byte_identical(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    original = TaskStore(tmp_path / "original")
    writer = ChangelogWriter(producer, topic, partition=1)
    for n in range(5):
        b = StoreBatch()
        for i in range(200):
            b.put(ColumnFamily.WINDOW_META, b"F%03d-%04d" % (n, i), b"v%d" % (i * n))
            b.put(ColumnFamily.MESSAGES, b"m%04d" % (n * 200 + i), b"x" * (i % 7))
        if n >= 2:
            # expire the frames of batch n-2 (range delete) and one message by key
            b.delete_range(ColumnFamily.WINDOW_META, b"F%03d" % (n - 2), b"F%03d" % (n - 1))
            b.delete(ColumnFamily.MESSAGES, b"m%04d" % n)
        commit_logged(original, writer, b, n)
    restored = TaskStore(tmp_path / "restored")
    result = restore_from_changelog(restored, {"bootstrap.servers": kafka_bootstrap}, topic, 1)
    assert result.batches == 5 and result.uncommitted == []
    assert dump(restored) == dump(original)
    assert local_position(restored) == local_position(original)
    assert len(dump(restored)[ColumnFamily.WINDOW_META]) == 2 * 200  # batches 3 and 4
    original.close()
    restored.close()


def test_keys_put_and_range_deleted_in_one_batch_stay_deleted(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "a")
    writer = ChangelogWriter(producer, topic, partition=0)
    b = StoreBatch()
    b.put(ColumnFamily.WINDOW_META, b"F1", b"stale")
    b.delete_range(ColumnFamily.WINDOW_META, b"F0", b"F2")
    b.put(ColumnFamily.WINDOW_META, b"F3", b"kept")
    commit_logged(store, writer, b, 0)
    restored = TaskStore(tmp_path / "b")
    restore_from_changelog(restored, {"bootstrap.servers": kafka_bootstrap}, topic, 0)
    assert dump(restored)[ColumnFamily.WINDOW_META] == [(b"F3", b"kept")]
    assert dump(restored) == dump(store)
    store.close()
    restored.close()


def test_a_torn_tail_is_not_applied_and_is_reported(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "a")
    writer = ChangelogWriter(producer, topic, partition=0)
    b = StoreBatch()
    b.put(ColumnFamily.WINDOW_META, b"k1", b"committed")
    commit_logged(store, writer, b, 0)
    # a crash mid-batch: records of the next batch reached the log, its marker did not
    for key, value in [(b"k1", b"torn"), (b"k2", b"torn")]:
        producer.produce(
            topic, key=CF_TAGS[ColumnFamily.WINDOW_META] + key, value=value, partition=0
        )
    producer.flush(10)
    restored = TaskStore(tmp_path / "b")
    result = restore_from_changelog(restored, {"bootstrap.servers": kafka_bootstrap}, topic, 0)
    assert restored.get(ColumnFamily.WINDOW_META, b"k1") == b"committed"
    assert restored.get(ColumnFamily.WINDOW_META, b"k2") is None
    assert result.uncommitted == [
        (ColumnFamily.WINDOW_META, b"k1"),
        (ColumnFamily.WINDOW_META, b"k2"),
    ]
    # the next batch overwrites the torn records with the true values, then a later
    # restore from scratch is right again
    extra = [(cf, k, restored.get(cf, k)) for cf, k in result.uncommitted]
    nb = StoreBatch()
    nb.put(ColumnFamily.WINDOW_META, b"k3", b"new")
    nb.put(ColumnFamily.CHECKPOINT, b"task", b"cp")
    marker = writer.wait(writer.write(nb, restored, batch_number=1, source_offsets=(), extra=extra))
    set_local_position(nb, marker + 1)
    restored.commit(nb)
    fresh = TaskStore(tmp_path / "c")
    restore_from_changelog(fresh, {"bootstrap.servers": kafka_bootstrap}, topic, 0)
    assert dump(fresh) == dump(restored)
    assert fresh.get(ColumnFamily.WINDOW_META, b"k2") is None
    for s in (store, restored, fresh):
        s.close()


def test_restore_catches_up_incrementally_from_the_local_position(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    leader = TaskStore(tmp_path / "leader")
    follower = TaskStore(tmp_path / "follower")
    writer = ChangelogWriter(producer, topic, 0)
    conf = {"bootstrap.servers": kafka_bootstrap}
    for n in range(3):
        b = StoreBatch()
        b.put(ColumnFamily.WINDOW_META, b"k%d" % n, b"v")
        commit_logged(leader, writer, b, n)
        result = restore_from_changelog(follower, conf, topic, 0)
        assert result.batches == 1  # only the new batch is replayed
        assert dump(follower) == dump(leader)
    assert restore_from_changelog(follower, conf, topic, 0).batches == 0
    leader.close()
    follower.close()


def test_a_store_ahead_of_its_changelog_is_reported(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    conf = {"bootstrap.servers": kafka_bootstrap}
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "a")
    for n in range(3):
        b = StoreBatch()
        b.put(ColumnFamily.WINDOW_META, b"k%d" % n, b"v")
        commit_logged(store, ChangelogWriter(producer, topic, 0), b, n)
    # the same store against a new, shorter changelog (e.g. the topic was recreated)
    other = make_topic(kafka_bootstrap, unique_name("changelog"))
    b = StoreBatch()
    b.put(ColumnFamily.WINDOW_META, b"x", b"v")
    b.put(ColumnFamily.CHECKPOINT, b"task", b"cp")
    other_writer = ChangelogWriter(producer, other, 0)
    other_writer.wait(other_writer.write(b, store, batch_number=0, source_offsets=()))
    assert restore_from_changelog(store, conf, other, 0).ahead
    assert not restore_from_changelog(store, conf, topic, 0).ahead
    store.close()


def test_produce_many_queues_every_record_in_order_past_a_full_queue(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A producer queue far smaller than the records: the rejected tails are queued
    again, and the partition holds every record once, in order."""
    from confluent_kafka import Consumer, TopicPartition

    from stores.changelog.writer import produce_many

    topic = make_topic(kafka_bootstrap, unique_name("many"), partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "queue.buffering.max.messages": 40})
    values: list[bytes | None] = [b"v%d" % i if i % 7 else None for i in range(500)]
    records = [{"key": b"k%d" % i, "value": v} for i, v in enumerate(values)]
    produce_many(producer, topic, records, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("g")})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes | None, bytes | None]] = []
    while len(got) < len(values):
        msgs = consumer.consume(500, timeout=10)
        assert msgs, f"only {len(got)} of {len(values)} records arrived"
        got += [(m.key(), m.value()) for m in msgs if m.error() is None]
    consumer.close()
    assert got == [(b"k%d" % i, v) for i, v in enumerate(values)]


def test_produce_many_raises_when_a_record_is_rejected_for_more_than_a_full_queue(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    from stores.changelog.writer import produce_many
    from stores.errors import ProduceError, StoreError

    topic = make_topic(kafka_bootstrap, unique_name("big"), partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2_000})
    records: list[dict[str, bytes | None]] = [
        {"key": b"a", "value": b"small"},
        {"key": b"b", "value": b"x" * 5_000},
    ]
    with pytest.raises(ProduceError, match=f"producing to {topic} failed") as caught:
        produce_many(producer, topic, records, partition=0)
    assert isinstance(caught.value, StoreError)


def transactional_writer(
    bootstrap: str, topic: str, transactional_id: str
) -> tuple[Producer, ChangelogWriter]:
    """A changelog writer of partition 0 as a job under exactly-once has one."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(30)
    return producer, ChangelogWriter(producer, topic, 0, transactional=True)


def commit_in_transaction(
    store: TaskStore, producer: Producer, writer: ChangelogWriter, key: bytes, number: int
) -> None:
    """One batch putting ``key`` in a transaction, committed as the job commits: the local
    position past the transaction's commit marker."""
    producer.begin_transaction()
    b = StoreBatch()
    b.put(ColumnFamily.WINDOW_META, key, b"committed")
    b.put(ColumnFamily.CHECKPOINT, b"task", b"cp%d" % number)
    marker = writer.wait(writer.write(b, store, batch_number=number, source_offsets=()))
    producer.commit_transaction(30)
    set_local_position(b, marker + 2)
    store.commit(b)


def test_a_restore_ends_past_the_transaction_markers_where_the_job_s_commits_do(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Under exactly-once each batch ends with its transaction's commit marker, and the job
    puts its local position past it: a restore ends there too (after an aborted batch at
    the end, past that), so that opening the store again reads nothing."""
    conf = {"bootstrap.servers": kafka_bootstrap}
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    producer, writer = transactional_writer(kafka_bootstrap, topic, unique_name("tx"))
    leader = TaskStore(tmp_path / "leader")
    for n in range(3):
        commit_in_transaction(leader, producer, writer, b"k%d" % n, n)
    committed_end = local_position(leader)
    fresh = TaskStore(tmp_path / "fresh")
    result = restore_from_changelog(fresh, conf, topic, 0)
    assert (result.batches, result.position) == (3, committed_end)
    assert local_position(fresh) == committed_end
    assert dump(fresh) == dump(leader)
    again = restore_from_changelog(fresh, conf, topic, 0)
    assert (again.applied, again.batches, again.position) == (0, 0, committed_end)
    # a batch whose transaction was aborted: never applied, and the position moves past it
    producer.begin_transaction()
    producer.produce(
        topic, key=CF_TAGS[ColumnFamily.WINDOW_META] + b"gone", value=b"x", partition=0
    )
    producer.flush(30)
    producer.abort_transaction(30)
    after_abort = restore_from_changelog(fresh, conf, topic, 0)
    assert after_abort.applied == 0 and after_abort.uncommitted == []
    assert fresh.get(ColumnFamily.WINDOW_META, b"gone") is None
    assert after_abort.position == local_position(fresh) > committed_end
    assert restore_from_changelog(fresh, conf, topic, 0).position == after_abort.position
    leader.close()
    fresh.close()


def test_the_keys_of_a_transaction_left_open_are_reported_uncommitted(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A producer that died inside its transaction leaves records past the last stable
    offset: a restore does not apply them and reports their keys (the task overwrites
    them with the store's true values before it logs anything new), whether it read
    batches first or had nothing to read. Before, the end it compared with was the last
    stable offset itself (what a read_committed consumer is told), so it never looked."""
    conf = {"bootstrap.servers": kafka_bootstrap}
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    producer, writer = transactional_writer(kafka_bootstrap, topic, unique_name("tx"))
    leader = TaskStore(tmp_path / "leader")
    commit_in_transaction(leader, producer, writer, b"k", 0)
    producer.begin_transaction()  # the next batch, whose producer dies before its commit
    for key in (b"k", b"open"):
        producer.produce(
            topic, key=CF_TAGS[ColumnFamily.WINDOW_META] + key, value=b"dirty", partition=0
        )
    producer.flush(30)
    expected = [(ColumnFamily.WINDOW_META, b"k"), (ColumnFamily.WINDOW_META, b"open")]
    try:
        fresh = TaskStore(tmp_path / "fresh")
        read = restore_from_changelog(fresh, conf, topic, 0)
        assert (read.batches, read.uncommitted) == (1, expected)
        assert fresh.get(ColumnFamily.WINDOW_META, b"k") == b"committed"
        assert fresh.get(ColumnFamily.WINDOW_META, b"open") is None
        caught_up = restore_from_changelog(leader, conf, topic, 0)  # nothing to read
        assert (caught_up.batches, caught_up.uncommitted) == (0, expected)
        assert read.position == caught_up.position == local_position(leader)
        # a changelog written without transactions (at-least-once) is not looked into
        plain = restore_from_changelog(leader, conf, topic, 0, transactional=False)
        assert (plain.batches, plain.uncommitted) == (0, [])
    finally:
        producer.abort_transaction(30)
    leader.close()
    fresh.close()


def test_the_last_marker_is_found_behind_a_batch_a_crash_left_unfinished(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A crash mid-batch leaves the batch's records at the end of the partition until
    the job runs again (aborted under exactly-once, a torn tail under at-least-once),
    thousands of them: the checkpoint before them is still the last one."""
    from stores.changelog import changelog_key, last_marker

    topic = make_topic(kafka_bootstrap, unique_name("changelog"), partitions=1)
    key = changelog_key(ColumnFamily.CHECKPOINT, b"checkpoint")
    tx = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    tx.init_transactions()
    tx.begin_transaction()
    tx.produce(topic, key=key, value=b"committed", partition=0)
    tx.commit_transaction()
    tx.begin_transaction()
    for i in range(3_000):
        tx.produce(topic, key=b"\x01k%d" % i, value=b"v", partition=0)
    tx.flush(10)
    tx.abort_transaction()
    conf = {"bootstrap.servers": kafka_bootstrap}
    assert last_marker(conf, topic, 0) == b"committed"
    torn = Producer(conf)
    for i in range(3_000):
        torn.produce(topic, key=b"\x01t%d" % i, value=b"v", partition=0)
    torn.flush(10)
    assert last_marker(conf, topic, 0) == b"committed"
