"""The count / offsets window operator: records, errors, the checkpoint and the shape guard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from countkit import DEDUCTIBLE, open_op, runtime, summary

from stores.rocks import ColumnFamily
from window_operator.count_windows import IncompatibleStateError
from window_operator.kernel import CHECKPOINT_KEY
from window_operator.results import ErrorCode


def test_bad_records_go_to_errors(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 2}, DEDUCTIBLE))
    stats = agg.add_batch(
        [{"k": "a", "ts": 0, "v": 1}, {"k": "a", "v": 1}, {"k": "a", "ts": 0, "v": "x"}]
    )
    assert (stats.applied, stats.rejected) == (1, 2)
    assert [e.code for e in agg.get_errors()] == [ErrorCode.MISSING_TIMESTAMP, ErrorCode.WRONG_TYPE]
    assert agg.add_message({"ts": 0, "v": 1}).rejected == 1
    (err,) = agg.get_errors()
    assert (err.code, err.offset) == (ErrorCode.MISSING_KEY, 1)


def test_reopening_with_another_window_shape_is_refused(tmp_path: Path) -> None:
    agg = open_op(runtime({"type": "count", "size": 4, "step": 2}), tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    agg.close()
    with pytest.raises(IncompatibleStateError, match="size"):
        open_op(runtime({"type": "count", "size": 6, "step": 2}), tmp_path)
    with pytest.raises(IncompatibleStateError, match="offsets"):
        open_op(runtime({"type": "offsets", "size": 4, "step": 2}), tmp_path)


def test_flush_without_commit_returns_one_batch_ending_in_the_checkpoint(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 2}, DEDUCTIBLE)
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    batch = agg.flush(commit=False)
    assert agg.store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) is None
    # the changelog writer needs exactly one checkpoint put: the batch's commit marker
    assert [m.cf for m in batch].count(ColumnFamily.CHECKPOINT) == 1
    agg.store.commit(batch)
    agg.store.close()
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 2}])
    assert summary(agg.get_result(), "count", "sum") == [("ON_TIME", "a", 0, 2, 0, 2, 3.0)]
    assert agg.batches == 1
    agg.close()
