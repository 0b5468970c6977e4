"""State values longer than one changelog record, logged in parts: restored exactly,
after compaction too, and nothing of them left in a compacted log once replaced."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from stores.changelog import (
    CF_TAGS,
    ChangelogError,
    ChangelogWriter,
    restore_from_changelog,
    set_local_position,
)
from stores.changelog.parts import HEAD_TAG, PART_TAG, logged_parts
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.kafka_admin import KafkaAdmin

pytestmark = pytest.mark.kafka

#: Small parts, so that the tests' values are logged in several.
PART = 64
META = ColumnFamily.WINDOW_META


def make_topic(bootstrap: str, name: str) -> str:
    KafkaAdmin(bootstrap).create_topic(name, 1, {"cleanup.policy": "compact", "retention.ms": "-1"})
    return name


def dump(store: TaskStore) -> dict[ColumnFamily, list[tuple[bytes, bytes]]]:
    """Every key of the store but the local changelog position."""
    return {
        cf: [(k, v) for k, v in store.scan(cf, b"") if not k.startswith(b"\x00changelog")]
        for cf in ColumnFamily
    }


def commit_logged(
    store: TaskStore, writer: ChangelogWriter, batch: StoreBatch, number: int
) -> None:
    batch.put(ColumnFamily.CHECKPOINT, b"task", b"checkpoint-%d" % number)
    marker = writer.wait(writer.write(batch, store, batch_number=number, source_offsets=()))
    set_local_position(batch, marker + 1)
    store.commit(batch)


def read_log(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every record of the topic's partition 0, in order."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.partition.eof": True}
    )
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[bytes, bytes | None]] = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "the changelog did not end"
            if msg.error() is not None:
                return out
            key = msg.key()
            assert key is not None
            out.append((key, msg.value()))
    finally:
        consumer.close()


def compacted(
    log: list[tuple[bytes, bytes | None]], cleaned: int, mapped: int, *, drop_tombstones: bool
) -> list[tuple[bytes, bytes | None]]:
    """The log after a cleaner pass: a record before offset ``cleaned`` is removed when a
    record of its key stands later in the part up to ``mapped`` (the cleaner's offset
    map), and so is a tombstone before ``cleaned`` (past ``delete.retention.ms``)."""
    last = {key: i for i, (key, _) in enumerate(log[:mapped])}
    return [
        (key, value)
        for i, (key, value) in enumerate(log)
        if i >= cleaned or (last.get(key, i) == i and not (drop_tombstones and value is None))
    ]


def test_values_in_parts_restore_exactly_also_from_any_compaction_of_their_log(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """A random history of a few keys whose values grow past a record and shrink again,
    deleted by key and by range. After every batch a fresh store restored from the log
    equals the store (its note of the logged parts too); at the end so does a store
    restored from compactions of the log: complete, and cut at random points. Before, a
    value longer than a changelog record failed the batch, and every restart with it."""
    rng = random.Random(7)
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0, part_bytes=PART)
    conf = {"bootstrap.servers": kafka_bootstrap}
    keys = [b"k%d" % i for i in range(5)]
    for n in range(12):
        b = StoreBatch()
        for key in rng.sample(keys, 3):
            size = rng.choice([0, 10, PART, PART + 1, 3 * PART, 5 * PART + 7])
            if rng.random() < 0.2:
                b.delete(META, key)
            else:
                b.put(META, key, bytes(rng.randrange(256) for _ in range(size)))
        if n % 5 == 4:
            b.delete_range(META, b"k0", b"k2")
        commit_logged(store, writer, b, n)
        fresh = TaskStore(tmp_path / f"fresh{n}")
        restore_from_changelog(fresh, conf, topic, 0)
        assert dump(fresh) == dump(store), n
        fresh.close()
    assert logged_parts(store)  # the history ends with values in parts
    log = read_log(kafka_bootstrap, topic)
    assert any(k[:1] == PART_TAG for k, _ in log)
    for trial in range(6):
        cleaned = len(log) if trial == 0 else rng.randrange(len(log))
        mapped = rng.randrange(cleaned, len(log) + 1)
        copy = make_topic(kafka_bootstrap, unique_name(f"compacted{trial}"))
        for key, value in compacted(log, cleaned, mapped, drop_tombstones=trial % 2 == 0):
            producer.produce(copy, key=key, value=value, partition=0)
        producer.flush(10)
        fresh = TaskStore(tmp_path / f"compacted{trial}")
        restore_from_changelog(fresh, conf, copy, 0)
        assert dump(fresh)[META] == dump(store)[META], trial
        assert logged_parts(fresh) == logged_parts(store), trial
        fresh.close()
    store.close()


def test_a_value_longer_than_kafka_takes_in_a_record_is_logged_and_restored(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """The walkthrough's case: an accumulator of 33 MiB, more than the changelog topic
    takes in one record (32 MiB), with the writer's own part size, through a producer
    and topic of Kafka's default record sizes. Before, Kafka refused the record
    (RecordTooLargeError), and the batch failed at every restart."""
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0)
    big = random.Random(3).randbytes(33 * 1024 * 1024)
    b = StoreBatch()
    b.put(META, b"page:/home", big)
    commit_logged(store, writer, b, 0)
    fresh = TaskStore(tmp_path / "fresh")
    restore_from_changelog(fresh, {"bootstrap.servers": kafka_bootstrap}, topic, 0)
    assert fresh.get(META, b"page:/home") == big
    assert logged_parts(fresh) == {CF_TAGS[META] + b"page:/home": 66}
    store.close()
    fresh.close()


def test_a_value_written_again_small_or_deleted_leaves_no_part_in_the_compacted_log(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """Heads and parts have keys of their own: the writer tombstones them when their
    value is replaced, or logged again in fewer parts. Before, nothing did, so a day's
    window logged in parts would have stayed in the compacted log for good."""
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0, part_bytes=PART)
    history: list[dict[bytes, bytes | None]] = [
        {b"a": b"x" * (4 * PART), b"b": b"y" * (2 * PART + 1)},
        {b"a": b"x" * (2 * PART)},  # fewer parts: parts 2 and 3 go
        {b"a": b"small", b"b": None},  # one replaced, one deleted
    ]
    for n, changes in enumerate(history):
        b = StoreBatch()
        for key, value in changes.items():
            if value is None:
                b.delete(META, key)
            else:
                b.put(META, key, value)
        commit_logged(store, writer, b, n)
    assert logged_parts(store) == {}
    log = read_log(kafka_bootstrap, topic)
    tags = [k[:1] for k, _ in log]
    # written (4 + 3), a again (2) and its parts 2 and 3 tombstoned, then all tombstoned
    assert tags.count(PART_TAG) == 4 + 3 + 2 + 2 + 2 + 3
    left = compacted(log, len(log), len(log), drop_tombstones=True)
    assert [k for k, _ in left if k[:1] in (PART_TAG, HEAD_TAG)] == []
    assert {k: v for k, v in left if k[:1] == CF_TAGS[META]} == {CF_TAGS[META] + b"a": b"small"}
    store.close()


def test_parts_of_a_torn_batch_are_tombstoned_by_the_next_write_of_their_key(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """At-least-once: a batch that logged a value in parts and died before its marker
    leaves them in the log. The restore reports the key uncommitted and notes the parts;
    the next batch writes the store's true value, and tombstones them."""
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    conf = {"bootstrap.servers": kafka_bootstrap}
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0, part_bytes=PART)
    b = StoreBatch()
    b.put(META, b"k", b"committed")
    commit_logged(store, writer, b, 0)
    torn = StoreBatch()
    torn.put(META, b"k", b"z" * (3 * PART))
    torn.put(ColumnFamily.CHECKPOINT, b"task", b"never")
    writer.wait(writer.write(torn, store, batch_number=1, source_offsets=()))  # no marker...
    # ...reaches the store; the log has its parts, head and marker: cut the marker off by
    # copying all but it into a fresh topic
    log = read_log(kafka_bootstrap, topic)[:-1]
    copy = make_topic(kafka_bootstrap, unique_name("torn"))
    for key, value in log:
        producer.produce(copy, key=key, value=value, partition=0)
    producer.flush(10)
    restored = TaskStore(tmp_path / "restored")
    result = restore_from_changelog(restored, conf, copy, 0)
    assert result.uncommitted == [(META, b"k")]
    assert restored.get(META, b"k") == b"committed"
    assert logged_parts(restored) == {CF_TAGS[META] + b"k": 3}
    again = ChangelogWriter(producer, copy, 0, part_bytes=PART)
    nb = StoreBatch()
    extra = [(cf, k, restored.get(cf, k)) for cf, k in result.uncommitted]
    nb.put(ColumnFamily.CHECKPOINT, b"task", b"cp")
    marker = again.wait(again.write(nb, restored, batch_number=1, source_offsets=(), extra=extra))
    set_local_position(nb, marker + 1)
    restored.commit(nb)
    left = compacted(read_log(kafka_bootstrap, copy), 10**9, 10**9, drop_tombstones=True)
    assert [k for k, _ in left if k[:1] in (PART_TAG, HEAD_TAG)] == []
    assert logged_parts(restored) == {}
    fresh = TaskStore(tmp_path / "fresh")
    restore_from_changelog(fresh, conf, copy, 0)
    assert dump(fresh) == dump(restored)
    for s in (store, restored, fresh):
        s.close()


def test_a_head_whose_parts_are_gone_and_that_nothing_replaced_is_an_error(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """A log that lost a part of a value no later record replaced cannot give the value
    back: the restore says so, rather than keep an older value of the key."""
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0, part_bytes=PART)
    b = StoreBatch()
    b.put(META, b"k", b"q" * (2 * PART))
    commit_logged(store, writer, b, 0)
    log = [
        (k, v)
        for k, v in read_log(kafka_bootstrap, topic)
        if k[:1] != PART_TAG or k[4:5] != b"\x01"
    ]
    copy = make_topic(kafka_bootstrap, unique_name("lost"))
    for key, value in log:
        producer.produce(copy, key=key, value=value, partition=0)
    producer.flush(10)
    fresh = TaskStore(tmp_path / "fresh")
    with pytest.raises(ChangelogError, match="logged in parts, and 1 such value"):
        restore_from_changelog(fresh, {"bootstrap.servers": kafka_bootstrap}, copy, 0)
    store.close()
    fresh.close()


def test_a_restore_that_failed_on_missing_parts_fails_again_when_asked_again(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """A restore commits what it applied every ``chunk_records`` records. Before, it went
    past a head whose parts were missing and failed only at the end: the retry (the
    runner retries a ChangelogError) read on from after the head, passed, and kept the
    key's older value (review)."""
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0, part_bytes=PART)
    for n, value in enumerate([b"older", b"q" * (2 * PART)]):
        b = StoreBatch()
        b.put(META, b"k", value)
        commit_logged(store, writer, b, n)
    for n in range(2, 6):  # later batches of other keys
        b = StoreBatch()
        b.put(META, b"other%d" % n, b"v")
        commit_logged(store, writer, b, n)
    log = read_log(kafka_bootstrap, topic)
    lost = [(k, v) for k, v in log if not (k[:1] == PART_TAG and k[1:5] == b"\x00\x00\x00\x01")]
    assert len(lost) == len(log) - 1
    copy = make_topic(kafka_bootstrap, unique_name("lost"))
    for k, v in lost:
        producer.produce(copy, key=k, value=v, partition=0)
    producer.flush(10)
    conf = {"bootstrap.servers": kafka_bootstrap}
    fresh = TaskStore(tmp_path / "fresh")
    for _ in range(2):
        with pytest.raises(ChangelogError, match="logged in parts"):
            restore_from_changelog(fresh, conf, copy, 0, chunk_records=1)
    assert fresh.get(META, b"other5") is None  # nothing past the bad head was committed
    store.close()
    fresh.close()


def test_a_batch_written_twice_logs_no_local_note_of_its_parts(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], producer: Any
) -> None:
    """The writer notes a key's part count in the batch (a local-only key). A second
    ``write`` of the same batch logged that note as a record (review)."""
    topic = make_topic(kafka_bootstrap, unique_name("changelog"))
    store = TaskStore(tmp_path / "store")
    writer = ChangelogWriter(producer, topic, 0, part_bytes=PART)
    b = StoreBatch()
    b.put(META, b"k", b"q" * (3 * PART))
    b.put(ColumnFamily.CHECKPOINT, b"task", b"cp")
    writer.wait(writer.write(b, store, batch_number=0, source_offsets=()))
    writer.wait(writer.write(b, store, batch_number=0, source_offsets=()))  # a retry
    keys = [k for k, _ in read_log(kafka_bootstrap, topic)]
    assert not [k for k in keys if k.startswith(CF_TAGS[ColumnFamily.CHECKPOINT] + b"\x00")]
    assert keys.count(HEAD_TAG + CF_TAGS[META] + b"k") == 2
    store.close()
