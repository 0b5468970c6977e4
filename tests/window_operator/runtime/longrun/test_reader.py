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
from window_operator.runtime.longrun.reader import InputReader, _runs


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
