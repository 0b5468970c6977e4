"""The ring of open frames: its marks, and persistence through a real RocksDB store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from countkit import DEDUCTIBLE, open_op, runtime

from stores.errors import StateCorruptError
from stores.keyspace import encode_key
from stores.rocks import StoreBatch, TaskStore
from window_operator.count_windows.per_key import KeyCountWindows
from window_operator.count_windows.ring import Ring
from window_operator.count_windows.state import RING
from window_operator.keytable import KeyTable

AGGS = [
    {"name": "n", "op": "count"},
    {"name": "s", "op": "sum", "field": "v"},
    {"name": "c", "op": "collect", "field": "v"},
    {"name": "m", "op": "median", "field": "v"},
]


def ints(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def small_ring() -> Ring:
    aggs = runtime({"type": "count", "size": 4, "step": 2}, DEDUCTIBLE).aggregations
    ring = Ring(aggs, 2, 2)
    ring.ensure(1)
    return ring


def test_a_long_ring_starts_with_room_for_one_key_and_grows() -> None:
    """A ring of a million frames per key started with room for 64 keys: gigabytes with
    object accumulators before the first event (helper's case: 9.5 GB, then killed)."""
    aggs = runtime({"type": "count", "size": 8192, "step": 1}, AGGS).aggregations
    ring = Ring(aggs, 8192, 1)
    assert ring.acc.shape[:2] == (1, 8192) and len(ring.objs) == 8192
    ring.ensure(3)
    assert ring.acc.shape[0] >= 3 and len(ring.objs) == ring.acc.shape[0] * 8192
    short = Ring(aggs, 2, 2)
    assert short.acc.shape[0] == 64  # short rings as before


# A key at count 5 (frames 0 1 2; slot = frame % 2): slot 0 holds frame 2, slot 1 frame 1.
def test_each_slot_holds_the_newest_frame_up_to_the_count() -> None:
    ring = small_ring()
    ring.set_counts(ints(0), ints(5))
    assert ring.frames_held(ints(0, 0), ints(0, 1)).tolist() == [2, 1]
    ring.set_counts(ints(0), ints(6))  # frame 3 started (empty) in slot 1
    assert ring.frames_held(ints(0, 0), ints(0, 1)).tolist() == [2, 3]


def test_marks_follow_changes_emissions_and_the_end_of_input() -> None:
    ring = small_ring()
    rows = ring.aggs.identity_rows(2) + 1
    ring.store_frames(ints(0, 0), ints(0, 1), rows, np.array([True, False]), None)
    assert (
        ring.early[0].tolist()
        == ring.unfinal[0].tolist()
        == ring.dirty[0].tolist()
        == [
            True,
            True,
        ]
    )
    ring.dirty[:] = False
    assert ring.next_seqs(ints(0), ints(1)).tolist() == [0]
    assert ring.next_seqs(ints(0), ints(1)).tolist() == [1]
    assert ring.dirty[0].tolist() == [False, True]
    ring.early_emitted()
    assert not ring.early.any() and ring.unfinal[0].all() and ring.dirty[0].all()
    ring.dirty[:] = False
    ring.input_ended()
    assert not ring.unfinal.any() and ring.dirty[0].all()
    ring.reset(ints(0), ints(3))  # frame 3 starts empty in slot 1
    assert ring.acc[0, 1].tolist() == ring.aggs.identity.tolist()
    assert ring.seq[0, 1] == 0 and not ring.early[0, 1]


def test_growing_keeps_what_the_ring_holds() -> None:
    ring = small_ring()
    ring.set_counts(ints(0), ints(3))
    ring.store_frames(ints(0), ints(1), ring.aggs.identity_rows(1) + 2, np.array([True]), None)
    ring.ensure(1000)
    assert len(ring.count) >= 1000 and ring.count[0] == 3
    assert ring.acc[0, 1].tolist() == (ring.aggs.identity + 2).tolist()
    assert not ring.dirty[999].any()


def test_a_flushed_ring_restores_counts_frames_marks_and_objects(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 4, "step": 2}, AGGS, emit={"early": "1s"})
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": k, "ts": 0, "v": float(i)} for i, k in enumerate("aabababbba")])
    agg.timeout(1_000)
    agg.timeout(2_000)  # EARLY results: the early marks are cleared and persisted
    agg.add_batch([{"k": "b", "ts": 0, "v": 20.0}])
    agg.flush()
    engine = agg.engine
    assert isinstance(engine, KeyCountWindows)
    ring = Ring(engine.aggs, 2, 2)
    keys: KeyTable[str] = KeyTable()
    ring.restore(agg.store, keys)
    assert keys.names == engine.keys.names
    n = len(keys)
    live = engine.ring
    assert ring.count[:n].tolist() == live.count[:n].tolist()
    for name in ("acc", "seq", "early", "unfinal"):
        assert getattr(ring, name)[:n].tolist() == getattr(live, name)[:n].tolist(), name
    finish = engine.aggs.finish
    assert finish(ring.acc[:n, 0], ring.objs[0 : 2 * n : 2]) == finish(
        live.acc[:n, 0], live.objs[0 : 2 * n : 2]
    )
    agg.close()


def test_a_slot_holding_the_wrong_frame_is_corrupt(tmp_path: Path) -> None:
    rt = runtime({"type": "count", "size": 4, "step": 2}, DEDUCTIBLE)
    agg = open_op(rt, tmp_path)
    agg.add_batch([{"k": "a", "ts": 0, "v": 1.0}] * 3)  # count 3: frame 1 in slot 1
    agg.close()
    with TaskStore(tmp_path) as store:
        (slot0,) = [v for k, v in store.scan_range(RING.all()) if RING.parse(k).slot == 0]
        batch = StoreBatch()
        batch.put(RING.cf, RING.key(encode_key("a"), 1), slot0)
        store.commit(batch)
    with pytest.raises(StateCorruptError, match="holds frame 0, expected 1"):
        open_op(rt, tmp_path)
