"""The count / offsets window operator: records, errors, the checkpoint and the shape guard."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from countkit import DEDUCTIBLE, open_op, runtime, summary

from stores.rocks import ColumnFamily, TaskStore
from window_operator.config import CountWindow
from window_operator.count_windows import CountWindowAggregator, IncompatibleStateError
from window_operator.kernel import CHECKPOINT_KEY, ClockState, InputPosition
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


def test_reopening_offsets_state_as_count_windows_is_refused(tmp_path: Path) -> None:
    agg = open_op(runtime({"type": "offsets", "size": 4, "step": 2}), tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    agg.close()
    with pytest.raises(IncompatibleStateError, match="count"):
        open_op(runtime({"type": "count", "size": 4, "step": 2}), tmp_path)


# size 2, EARLY every 2 s; a at offset 0, the job's clock adopted, then a at offset 2:
#
#   count    a's messages 0, 1 fill [0,2): ON_TIME with both
#   offsets  offset 2 passes the end of [0,2): ON_TIME with the message at offset 0
@pytest.mark.parametrize(
    ("window", "last"),
    [({"type": "count", "size": 2}, 2), ({"type": "offsets", "size": 2}, 1)],
)
def test_adopting_the_jobs_clock_takes_only_its_wall_clock(
    op: Any, window: dict[str, Any], last: int
) -> None:
    agg = op(runtime(window, DEDUCTIBLE, emit={"early": "2s"}))
    agg.add_message({"k": "a", "ts": 5_000_000, "v": 1}, offset=0)
    before = agg.watermark
    agg.adopt_clock(ClockState(watermark=10**12, now=100_000))
    assert agg.watermark == before  # counts and offsets fire these windows, not event time
    assert agg.get_result() == []
    agg.timeout(0)  # the EARLY period starts at the adopted wall clock, not at 0
    agg.timeout(101_000)
    assert agg.get_result() == []
    agg.timeout(102_000)
    assert summary(agg.get_result(), "count") == [("EARLY", "a", 0, 2, 0, 1)]
    agg.add_message({"k": "a", "ts": 0, "v": 1}, offset=2)
    assert summary(agg.get_result(), "count") == [("ON_TIME", "a", 0, 2, 1, last)]


def test_handled_offsets_are_kept_per_input_position(op: Any) -> None:
    agg = op(runtime({"type": "count", "size": 2}, DEDUCTIBLE))
    agg.mark_consumed(3, 7)
    agg.mark_consumed(3, 5)  # an offset never goes back
    agg.add_message({"k": "a", "ts": 0, "v": 1}, partition=1)
    assert agg.offsets == {InputPosition(0, 1): 0, InputPosition(0, 3): 7}
    assert agg.add_message({"k": "a", "ts": 0, "v": 1}, partition=3, offset=6).replayed == 1


def test_single_records_need_a_decoder(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 2}, DEDUCTIBLE)
    window = rt.config.window
    assert isinstance(window, CountWindow)
    agg = CountWindowAggregator(
        window=window, aggregations=rt.aggregations, policy=rt.policy, store=TaskStore(tmp_path)
    )
    with pytest.raises(ValueError, match="RecordDecoder"):
        agg.add_message({"k": "a", "ts": 0, "v": 1})
    with pytest.raises(ValueError, match="RecordDecoder"):
        agg.add_batch([{"k": "a", "ts": 0, "v": 1}])
    agg.close()


@pytest.mark.parametrize("shape", ["count", "offsets"])
def test_live_state_is_the_windows_holding_messages_that_have_not_fired(
    op: Any, shape: str
) -> None:
    """Oracle: every (key, window) a message went into, minus those that fired ON_TIME."""
    size, step = 4, 2
    agg = op(runtime({"type": shape, "size": size, "step": step}, DEDUCTIBLE))
    rng = random.Random(7)
    held: set[tuple[str, int]] = set()
    fired: set[tuple[str, int]] = set()
    seen: dict[str, int] = {}
    for offset in range(80):
        key = rng.choice("abcd")
        agg.add_message({"k": key, "ts": offset, "v": 1}, offset=offset)
        # a count window numbers the key's messages; an offsets window the partition's
        x = seen.get(key, 0) if shape == "count" else offset
        seen[key] = seen.get(key, 0) + 1
        held |= {(key, s) for s in range(x - x % step, x - size, -step) if s >= 0}
        fired |= {(r.key, r.window_start) for r in agg.get_result() if r.kind.value == "ON_TIME"}
        live = held - fired
        state = agg.live_state()
        assert (state.keys, state.windows) == (len({k for k, _ in live}), len(live)), offset
    assert agg.live_state().windows > 0
