"""The checkpoint: one record, one codec; corrupt or foreign state is refused."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from stores.errors import StateCorruptError
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.errors import IncompatibleStateError
from window_operator.kernel import CHECKPOINT_KEY, Checkpoint, InputPosition, read_checkpoint
from window_operator.kernel.checkpoint import shape_change


def test_round_trip() -> None:
    cp = Checkpoint(
        shape={"type": "time", "size": 10, "step": 5},
        offsets={InputPosition(0, 1): 7, InputPosition(1, 0): 3},
        max_ts={InputPosition(0, 1): 99},
        watermark=90,
        batches=4,
        operator={"late_since": None, "x": [1, 2]},
        now=1_700_000_000_000,
        last_active={InputPosition(0, 1): 1_699_999_999_000},
        first_wall=1_699_999_000_000,
    )
    assert Checkpoint.decode(cp.encode()) == cp


def test_a_checkpoint_that_moves_only_the_wall_clock_is_told_apart() -> None:
    """What a timer pass of an idle task writes: the runner commits nothing then."""
    pos = InputPosition(0, 1)
    before = Checkpoint(
        shape={"type": "time"},
        offsets={pos: 7},
        max_ts={pos: 99},
        watermark=90,
        batches=4,
        operator={"late_since": None},
        now=1_000,
        last_active={pos: 900},
        first_wall=500,
    )
    idle = replace(before, now=2_000, batches=5)
    assert idle.moves_only_the_wall_clock(before)
    for changed in (
        {"offsets": {pos: 8}},
        {"max_ts": {pos: 100}},
        {"watermark": 91},
        {"operator": {"late_since": 1_500}},
        {"last_active": {pos: 1_900}},
        {"first_wall": 400},
        {"shape": {"type": "time", "aggregations": []}},
    ):
        assert not replace(idle, **changed).moves_only_the_wall_clock(before), changed


def test_a_checkpoint_written_before_the_wall_clock_was_kept_has_none() -> None:
    old = orjson.loads(Checkpoint({"type": "a"}, watermark=5).encode())
    for newer in ("now", "last_active", "first_wall"):
        del old[newer]
    decoded = Checkpoint.decode(orjson.dumps(old))
    assert decoded.now is None and decoded.watermark == 5
    assert decoded.last_active == {} and decoded.first_wall is None


def test_a_store_of_another_shape_or_corrupt_bytes_is_refused(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "s") as store:
        batch = StoreBatch()
        batch.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, Checkpoint({"type": "a"}).encode())
        store.commit(batch)
        assert read_checkpoint(store, {"type": "a"}) is not None
        with pytest.raises(IncompatibleStateError, match="type"):
            read_checkpoint(store, {"type": "b"})
        bad = StoreBatch()
        bad.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, b"{not json")
        store.commit(bad)
        with pytest.raises(StateCorruptError):
            read_checkpoint(store, {"type": "a"})


def test_a_checkpoint_written_before_the_aggregations_were_kept_is_continued(
    tmp_path: Path,
) -> None:
    """A store of an earlier version has no aggregations in its shape: it is continued
    (they cannot be compared); one with other aggregations is refused, naming them."""
    time = {"type": "time", "size": 10, "step": 5}
    with TaskStore(tmp_path / "s") as store:
        batch = StoreBatch()
        batch.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, Checkpoint(time).encode())
        store.commit(batch)
        assert read_checkpoint(store, {**time, "aggregations": [["count", None, None]]})
        newer = StoreBatch()
        shape = {**time, "aggregations": [["count", None, None]]}
        newer.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, Checkpoint(shape).encode())
        store.commit(newer)
        assert read_checkpoint(store, shape) is not None
        with pytest.raises(IncompatibleStateError, match=r'aggregations \[\["mean","v",null\]\]'):
            read_checkpoint(store, {**time, "aggregations": [["mean", "v", None]]})
        with pytest.raises(IncompatibleStateError, match="aggregations"):
            read_checkpoint(store, time)  # a shape without them does not match one with


def test_a_shape_change_is_said_in_the_config_s_words() -> None:
    """A join's time bounds are not config fields: a refusal said "hi 120000"; and
    aggregations only reordered were refused without saying so (config walkthrough)."""
    join = {"type": "join", "lo": -120_000, "hi": 120_000}
    said = shape_change(join, {**join, "hi": 300_000})
    assert said == (
        "time condition's upper bound (ms) 120000; this config has time condition's upper "
        "bound (ms) 300000"
    )
    aggs = [["count", None, None], ["sum", "v", None]]
    reordered = shape_change({"aggregations": aggs}, {"aggregations": aggs[::-1]})
    assert reordered is not None and reordered.endswith("(the same operations in another order)")
    other = shape_change({"aggregations": aggs}, {"aggregations": aggs[:1]})
    assert other is not None and "another order" not in other


def test_a_part_the_config_lacks_is_named_as_lacking() -> None:
    """A part of the stored shape that the config's lacks: the refusal says so, not
    "this config has " and nothing (review)."""
    said = shape_change({"type": "time", "aggregations": [["count", None, None]]}, {"type": "time"})
    assert said == 'aggregations [["count",null,null]]; this config has no aggregations'
