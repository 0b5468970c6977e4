"""The reader's split of a consume into runs of one partition (against itertools.groupby)."""

from __future__ import annotations

from itertools import groupby

from confluent_kafka import Message
from hypothesis import given
from hypothesis import strategies as st

from window_operator.runtime.longrun.reader import _runs


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
