"""Streaming queries over the wo_kafka source against a real broker and local[2] Spark."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from sourcekit import (  # noqa: E402
    Record,
    all_records,
    as_bytes,
    produce,
    run_available_now,
    simple_items,
    transaction,
    transactional_producer,
)

from window_operator.spark.kafka_source import (  # noqa: E402
    KAFKA_COLUMNS,
    builtin_kafka_available,
    kafka_end_offsets,
    read_kafka_stream,
)


class _FakeReader:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def format(self, name: str) -> _FakeReader:
        self.calls.append(("format", name))
        return self

    def options(self, **opts: str) -> _FakeReader:
        self.calls.append(("options", opts))
        return self

    def load(self) -> _FakeReader:
        return self

    def select(self, *cols: str) -> tuple[str, ...]:
        return cols


def test_builtin_kafka_format_gets_equivalent_options() -> None:
    fake = type("FakeSpark", (), {"readStream": _FakeReader(), "_jvm": None})()
    cols = read_kafka_stream(
        fake,
        bootstrap_servers="b:9092",
        topics=["a", "b"],
        starting_offsets={"a": {"0": 5}},
        max_offsets_per_trigger=100,
        extra={"arrowBatchSize": "5", "kafka.client.id": "me"},
        use_builtin=True,
    )
    assert cols == KAFKA_COLUMNS
    assert fake.readStream.calls == [
        ("format", "kafka"),
        (
            "options",
            {
                "kafka.bootstrap.servers": "b:9092",
                "subscribe": "a,b",
                "startingOffsets": '{"a": {"0": 5}}',
                "maxOffsetsPerTrigger": "100",
                "kafka.client.id": "me",
                "kafka.isolation.level": "read_committed",
                "includeHeaders": "true",
            },
        ),
    ]
    assert not builtin_kafka_available(fake)


def test_available_now_reads_exactly_the_produced_records(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    items = [
        (
            i % 4,
            None if i % 7 == 0 else f"k{i}".encode(),
            None if i % 11 == 0 else f"value-{i}".encode(),
            [("h", f"{i}".encode()), ("empty", None)] if i % 3 == 0 else None,
        )
        for i in range(2000)
    ]
    produced = produce(kafka_bootstrap, topic, items)
    df = read_kafka_stream(spark, bootstrap_servers=kafka_bootstrap, topics=[topic])
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    batches = run_available_now(df, tmp_path / "ckpt")
    assert all_records(batches) == Counter(produced)
    assert len(batches) == 1 and batches[0].num_partitions == 4


def test_max_offsets_per_trigger_splits_the_backlog(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    produced = produce(kafka_bootstrap, topic, simple_items(2000))
    df = read_kafka_stream(
        spark, bootstrap_servers=kafka_bootstrap, topics=[topic], max_offsets_per_trigger=300
    )
    batches = run_available_now(df, tmp_path / "ckpt")
    sizes = [len(b.records) for b in batches]
    assert sizes == [300] * 6 + [200]
    assert all_records(batches) == Counter(produced)


def test_restart_from_checkpoint_reads_only_new_records(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    first = produce(kafka_bootstrap, topic, simple_items(500, tag="a"))
    ckpt = tmp_path / "ckpt"

    def stream() -> Any:
        return read_kafka_stream(spark, bootstrap_servers=kafka_bootstrap, topics=[topic])

    assert all_records(run_available_now(stream(), ckpt)) == Counter(first)
    second = produce(kafka_bootstrap, topic, simple_items(300, tag="b"))
    assert all_records(run_available_now(stream(), ckpt)) == Counter(second)
    assert run_available_now(stream(), ckpt) == []


def test_read_committed_with_non_contiguous_offsets(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    # Committing and aborting producers are distinct: see the xfail test below for noida-db's
    # defect with a producer that commits after it aborted.
    committer = transactional_producer(kafka_bootstrap)
    aborter = transactional_producer(kafka_bootstrap)
    committed = transaction(kafka_bootstrap, committer, topic, simple_items(203, tag="c1"), True)
    transaction(kafka_bootstrap, aborter, topic, simple_items(203, tag="ab"), False)
    committed += transaction(kafka_bootstrap, committer, topic, simple_items(203, tag="c2"), True)
    # An open transaction at the end: read_committed stops at the last stable offset.
    aborter.begin_transaction()
    produce(kafka_bootstrap, topic, simple_items(20, tag="open"), producer=aborter)
    assert aborter.flush(30) == 0
    try:
        ends = kafka_end_offsets(kafka_bootstrap, [topic])
        offsets_spanned = sum(ends[topic].values())
        assert offsets_spanned > len(committed) + 203  # markers and aborted records in there
        for limit, name in ((None, "all"), (71, "limited")):
            df = read_kafka_stream(
                spark,
                bootstrap_servers=kafka_bootstrap,
                topics=[topic],
                max_offsets_per_trigger=limit,
            )
            batches = run_available_now(df, tmp_path / name)
            assert all_records(batches) == Counter(committed)
            if limit is not None:
                assert all(len(b.records) <= limit for b in batches)
                assert len(batches) > 1
    finally:
        aborter.abort_transaction(30)


def test_starting_offsets_latest_and_json(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    old = produce(kafka_bootstrap, topic, simple_items(100, tag="old"))
    ckpt = tmp_path / "latest"

    def latest() -> Any:
        return read_kafka_stream(
            spark, bootstrap_servers=kafka_bootstrap, topics=[topic], starting_offsets="latest"
        )

    # Spark runs a first (empty) batch that records the resolved start offsets.
    assert all_records(run_available_now(latest(), ckpt)) == Counter()
    new = produce(kafka_bootstrap, topic, simple_items(60, tag="new"))
    assert all_records(run_available_now(latest(), ckpt)) == Counter(new)

    # p0 from offset 10, p1 earliest, p2 latest, p3 unspecified (earliest).
    start = {topic: {"0": 10, "1": -2, "2": -1}}
    df = read_kafka_stream(
        spark, bootstrap_servers=kafka_bootstrap, topics=[topic], starting_offsets=start
    )
    expected = [r for r in old + new if r[0] in (1, 3) or (r[0] == 0 and r[1] >= 10)]
    assert all_records(run_available_now(df, tmp_path / "json")) == Counter(expected)


def test_processing_time_trigger_picks_up_new_records(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    assert not builtin_kafka_available(spark)  # these tests exercise the Python source
    first = produce(kafka_bootstrap, topic, simple_items(200, tag="a"))
    seen: list[list[Record]] = []

    def collect(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.select("partition", "offset", "key", "value").collect()
        seen.append([(r.partition, r.offset, as_bytes(r.key), as_bytes(r.value), ()) for r in rows])

    df = read_kafka_stream(spark, bootstrap_servers=kafka_bootstrap, topics=[topic])
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:

        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 60
            while sum(len(b) for b in seen) < n and time.monotonic() < deadline:
                assert query.exception() is None
                time.sleep(0.1)

        wait_for(200)
        time.sleep(0.5)  # idle triggers: no new data, no batch
        second = produce(kafka_bootstrap, topic, simple_items(100, tag="b"))
        wait_for(300)
    finally:
        query.stop()
    assert Counter(r for b in seen for r in b) == Counter(first + second)
    assert all(seen), "no empty micro-batches while idle"


def test_one_spark_partition_per_kafka_partition_with_data(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    items = [(0, b"k", b"v0", None)] * 400 + [(1, b"k", b"v1", None)] * 3
    items += [(3, b"k", b"v3", None)] * 200
    produced = produce(kafka_bootstrap, topic, items)
    df = read_kafka_stream(
        spark, bootstrap_servers=kafka_bootstrap, topics=[topic], max_offsets_per_trigger=150
    )
    batches = run_available_now(df, tmp_path / "ckpt")
    assert all_records(batches) == Counter(produced)
    for b in batches:
        assert b.num_partitions == len({r[0] for r in b.records}), b
    assert {b.num_partitions for b in batches} >= {2, 3}
