"""The reader: its split of a consume into runs of one partition (against
itertools.groupby), and its word that a partition was read to its end."""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import groupby

import pytest
from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st
from jobkit import create_topic, produce

from window_operator.runtime.exchange import InputPartition
from window_operator.runtime.gaps import InputGapError
from window_operator.runtime.longrun.reader import Chunked, InputReader, _runs


@given(st.lists(st.tuples(st.sampled_from(["in", "right", "x" * 40]), st.integers(0, 3)),
                max_size=60))  # fmt: skip
def test_runs_are_the_partitions_in_order(sources: list[tuple[str, int]]) -> None:
    msgs = [Message(topic=t, partition=p, offset=i) for i, (t, p) in enumerate(sources)]
    expected = [
        (tp, list(run)) for tp, run in groupby(msgs, key=lambda m: (m.topic(), m.partition()))
    ]
    got = _runs(msgs)
    assert [(tp, [m.offset() for m in run]) for tp, run in got] == [
        (tp, [m.offset() for m in run]) for tp, run in expected
    ]


@pytest.mark.kafka
def test_a_partition_is_caught_up_only_at_an_end_past_its_last_chunk(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The tasks count a partition as active from its last chunk until its reader reached
    its end. A consume can hold an end-of-partition event and, behind it, records that
    came after it: that end is stale (records wait past it), and the reader says nothing."""
    topic = unique_name("ends")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(5)])
    source = InputPartition(0, topic, 0)
    reader = InputReader("r", [source], {"bootstrap.servers": kafka_bootstrap})
    reader.assign({source.position: 0})
    try:
        time.sleep(2)  # the consumer fetches offsets 0 to 4 and meets the end at 5
        produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(5, 8)])
        time.sleep(2)  # then 5 to 7: its queue holds 0-4, the end at 5, 5-7, the end at 8
        chunks = reader.read(10, max_records=7)  # 0-4, the end at 5, then 5
        assert [(c.range.start, c.range.end) for c in chunks] == [(0, 6)]
        assert reader.take_caught_up() == []  # the end at 5 is behind what it read
        chunks = reader.read(10, max_records=3)  # 6, 7, the end at 8
        assert [(c.range.start, c.range.end) for c in chunks] == [(6, 8)]
        assert reader.take_caught_up() == [source]
    finally:
        reader.close()


@pytest.mark.kafka
def test_an_available_now_run_s_end_behind_a_commit_marker_is_caught_up(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The run ends at offset 4, past the commit marker at 3 of a transaction that wrote
    0 to 2, and the partition grew after the run began: the read stops at 3, no end of
    the partition comes, yet the reader says it is done with it (before, it did not:
    the tasks held the watermark back at its last event time for the rest of the run)."""
    from confluent_kafka import Producer

    topic = unique_name("txn-end")
    create_topic(kafka_bootstrap, topic, 1)
    txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("t")})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, b"%d" % i, partition=0)
    txn.commit_transaction(30)
    produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(4, 9)])
    source = InputPartition(0, topic, 0)
    config = {"bootstrap.servers": kafka_bootstrap}
    reader = InputReader("r", [source], config, ends={source.position: 4})
    reader.assign({source.position: 0})
    try:
        chunks: list[Chunked] = []
        deadline = time.monotonic() + 30
        while reader.reading and time.monotonic() < deadline:
            chunks += reader.read(1, max_records=4)  # 0 to 2 and 4: no end event
        assert [(c.range.start, c.range.end) for c in chunks] == [(0, 3)]
        assert not reader.reading
        assert reader.take_caught_up() == [source]
        # the marker at 3 lies below the run's end, past which a record came: the
        # positions move over it (else the run ended with a lag of 1; a review)
        assert reader.past_markers(source.position) == 4
    finally:
        reader.close()


@pytest.mark.kafka
def test_records_wait_in_a_partition_whose_end_the_consumer_fetched_past_the_reader(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A worker held back names the partitions in which records wait (so that they do
    not go idle meanwhile) and not the silent ones (so that they do): the consumer's
    fetches go on while the reader is not reading, and tell their ends. A commit
    marker past the last record is no record waiting."""
    from confluent_kafka import Producer

    topic = unique_name("waiting")
    create_topic(kafka_bootstrap, topic, 2)
    txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("t")})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, b"%d" % i, partition=1)
    txn.commit_transaction(30)  # partition 1: records 0-2, the commit marker at 3
    sources = [InputPartition(0, topic, 0), InputPartition(0, topic, 1)]
    p0, p1 = (s.position for s in sources)
    reader = InputReader("r", sources, {"bootstrap.servers": kafka_bootstrap})
    reader.assign({p0: 0, p1: 0})

    def read_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 20
        while not done():
            assert time.monotonic() < deadline, "timed out"
            reader.read(0.1)

    try:
        read_until(lambda: reader.next_offset[p1] == 3 and reader.end_seen.get(p1) == 4)
        read_until(lambda: p0 in reader.end_seen)
        assert reader.waiting() == set()  # both silent: partition 0 empty, 1 at its marker
        produce(kafka_bootstrap, topic, [], raw=[(None, b"x", 0), (None, b"y", 0)])
        deadline = time.monotonic() + 20
        while reader.waiting() != {p0}:  # not read: the consumer's fetches tell the end
            assert time.monotonic() < deadline, "the consumer's fetches did not tell the end"
            time.sleep(0.05)
        read_until(lambda: reader.next_offset[p0] == 2 and reader.end_seen.get(p0) == 2)
        assert reader.waiting() == set()
    finally:
        reader.close()


@pytest.mark.kafka
def test_a_partition_that_ends_before_the_state_s_position_is_told_from_one_trimmed(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Both stop the worker; they told the same story ("deleted before they were read"),
    but a partition that ends before the state's position lost records the job read (a
    broker that lost acknowledged writes, or the topic created again)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = unique_name("gone")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(10)])
    source = InputPartition(0, topic, 0)
    config = {"bootstrap.servers": kafka_bootstrap}

    def first_read(begin: int) -> str:
        reader = InputReader("worker 0", [source], config)
        reader.assign({source.position: begin})
        try:
            with pytest.raises(InputGapError) as failed:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    reader.read(1)
            return str(failed.value)
        finally:
            reader.close()

    told = first_read(25)  # the state applied up to 24
    assert told.startswith(
        f"worker 0: its state applied {topic}[0] up to offset 24, but the partition now ends "
        "at offset 10: the broker lost records the job had read"
    )
    admin = AdminClient(config)
    for f in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        f.result(30)
    told = first_read(3)
    assert told.startswith(f"worker 0: {topic}[0] no longer holds the records the state")
    assert "they were deleted before they were read" in told


@pytest.mark.kafka
def test_both_inputs_of_a_self_join_read_their_one_partition(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A self-join's inputs read one topic: a worker that holds partition 0 of both
    (4 partitions on 2 workers, or one worker) assigned it twice, and librdkafka refused
    (``Duplicate ... in input list``): the workers failed at every start. Each input
    gets its chunk, from its own position."""
    topic = unique_name("self")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(5)])
    left, right = InputPartition(0, topic, 0), InputPartition(1, topic, 0)
    reader = InputReader("r", [left, right], {"bootstrap.servers": kafka_bootstrap})
    reader.assign({left.position: 0, right.position: 3})
    try:
        got: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 20
        while (len(got[0]), len(got[1])) != (5, 2) and time.monotonic() < deadline:
            for c in reader.read(1):
                got[c.partition.source] += list(c.records.offsets)
        assert got == {0: [0, 1, 2, 3, 4], 1: [3, 4]}
        assert sorted(p.source for p in reader.take_caught_up()) == [0, 1]
    finally:
        reader.close()


@pytest.mark.kafka
@pytest.mark.parametrize("self_join", [False, True])
def test_a_position_past_the_partitions_end_is_a_gap_in_a_self_join_too(
    kafka_bootstrap: str, unique_name: Callable[[str], str], self_join: bool
) -> None:
    """Review: an input whose state applied offsets the partition no longer holds (the
    broker lost them; the topic made again) is refused: records written there later
    would be skipped as replays. Alone, its consumer's assignment past the end says so
    (OFFSET_OUT_OF_RANGE); in a self-join whose other input starts lower, the partition
    was assigned from that input's position only, and the input past the end waited
    silently, then skipped the offsets up to its position."""
    topic = unique_name("lost")
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [], raw=[(None, b"%d" % i, 0) for i in range(5)])
    left, right = InputPartition(0, topic, 0), InputPartition(1, topic, 0)
    parts = [left, right] if self_join else [right]
    reader = InputReader("r", parts, {"bootstrap.servers": kafka_bootstrap})
    got: dict[int, list[int]] = {0: [], 1: []}
    try:
        with pytest.raises(InputGapError, match="but the partition now ends at offset 5"):
            reader.assign({left.position: 0, right.position: 8})
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                for c in reader.read(0.5):
                    got[c.partition.source] += list(c.records.offsets)
                if got[0] == [0, 1, 2, 3, 4]:  # past the end: written later, skipped
                    later = [(None, b"%d" % i, 0) for i in range(5, 10)]
                    produce(kafka_bootstrap, topic, [], raw=later)
                    got[0].append(-1)
        assert got[1] == []
    finally:
        reader.close()
