"""Offsets: rate limiting of a micro-batch."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from window_operator.spark.kafka_source.offsets import rate_limit  # noqa: E402


def test_rate_limit_is_proportional_and_never_exceeds_the_limit() -> None:
    begins = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5, ("t", 3): 7}
    ends = {("t", 0): 1000, ("t", 1): 110, ("t", 2): 5, ("t", 3): 8}
    backlogged = [("t", 0), ("t", 1), ("t", 3)]
    for limit in (1, 2, 3, 4, 10, 101, 500, 1010):
        out = rate_limit(limit, begins, ends)
        admitted = {tp: out[tp] - begins[tp] for tp in ends}
        assert sum(admitted.values()) == min(limit, 1011)
        assert all(0 <= admitted[tp] <= ends[tp] - begins[tp] for tp in ends)
        if limit >= 3:  # nobody starves
            assert all(admitted[tp] >= 1 for tp in backlogged)
    # 1 each, then 98 shared in proportion to 999 : 9 : 0 (largest remainder).
    out = rate_limit(101, begins, ends)
    assert [out[tp] - begins[tp] for tp in backlogged] == [98, 2, 1]
    # Fewer offsets than partitions: who goes first rotates with the start offsets.
    firsts = []
    current = dict(begins)
    for _ in range(3):
        out = rate_limit(1, current, ends)
        firsts += [tp for tp in ends if out[tp] > current[tp]]
        current = out
    assert sorted(firsts) == backlogged
    assert rate_limit(5000, begins, ends) == ends
