"""The seed's query API of a join: windows (all keys, or one) and stored messages."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from joinkit import S, join_runtime

from window_operator.join import JoinOperator, message_position


def test_get_windows_and_get_messages(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": 30 * S}), cache_max_rows=0)
    op.add_records("L", [{"k": k, "ts": t * S, "n": t} for t, k in [(5, 1), (10, 2), (40, 1)]])
    op.add_records("R", [{"k": 1, "ts": 35 * S, "n": 9}], partition=2, offsets=[17])
    op.flush()
    windows = op.get_windows(None, 0, 60 * S)
    assert [(w.source, w.start, w.end, w.count) for w in windows] == [
        ("L", 0, 30 * S, 2),
        ("L", 30 * S, 60 * S, 1),
        ("R", 30 * S, 60 * S, 1),
    ]
    assert windows[2].first_position == message_position(2, 17)
    keyed = op.get_windows(1, 0, 60 * S)
    assert [(w.source, w.key, w.start, w.count) for w in keyed] == [
        ("L", (1,), 0, 1),
        ("L", (1,), 30 * S, 1),
        ("R", (1,), 30 * S, 1),
    ]
    # (ts, position) bounds are inclusive; the row at (40 s, offset 2) is past (40 s, 0)
    msgs = op.get_messages("L", 5 * S, 0, 40 * S, 0, join_keys=[2, 1])
    assert [(m.key, m.ts, m.record["n"]) for m in msgs] == [((2,), 10 * S, 10), ((1,), 5 * S, 5)]
    assert [m.record["n"] for m in op.get_messages("L", 5 * S, 0, 40 * S, 2)] == [5, 10, 40]
    (shipment,) = op.get_messages("R", 0, 0, 2**61, 2**62)
    assert (shipment.partition, shipment.offset, shipment.source) == (2, 17, "R")


@pytest.mark.parametrize("cache_max_rows", [0, 1000])
def test_queries_of_a_multi_field_key_read_memory_and_store_alike(
    open_join: Callable[..., JoinOperator], cache_max_rows: int
) -> None:
    op = open_join(
        join_runtime({"range": 10 * S, "on": ["k", "k2"]}), cache_max_rows=cache_max_rows
    )
    recs = [{"k": 1, "k2": k2, "ts": t * S, "n": t} for t, k2 in [(1, "x"), (2, "y"), (3, "x")]]
    op.add_records("L", recs)
    op.flush()
    msgs = op.get_messages("L", 0, 0, 60 * S, 0, join_keys=[(1, "x")])
    assert [(m.key, m.record["n"]) for m in msgs] == [((1, "x"), 1), ((1, "x"), 3)]
    (window,) = op.get_windows((1, "y"), 0, 60 * S)
    assert (window.key, window.count, window.min_ts) == ((1, "y"), 1, 2 * S)
    with pytest.raises(ValueError, match="2 fields"):
        op.get_messages("L", 0, 0, 60 * S, 0, join_keys=[(1,)])
