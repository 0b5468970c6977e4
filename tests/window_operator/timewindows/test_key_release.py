"""Keys that come and go: memory and store stay bounded by the live state (issue: churn).

Timeline (tumbling 10 s count, retention 1 min, lateness 0): every batch brings 50 new
keys, 100 s of event time after the previous one, so after a batch every key of the
batch before is past retention::

    batch   0        1        2        ...
    time    0 s      100 s    200 s
    keys    k0-0..   k1-0..   k2-0..   (each batch: new keys, 3 events each)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import runtime_for

from stores.rocks import TaskStore
from window_operator.events import EventBatch
from window_operator.policies import END_OF_TIME
from window_operator.results import Kind
from window_operator.timewindows import WindowedAggregator
from window_operator.timewindows.state import FRAMES, WINDOWS
from window_operator.windows import TimeWindowing

S = 1000


def open_agg(path: Path) -> WindowedAggregator:
    rt = runtime_for(
        window={"type": "tumbling", "size": "10s"},
        retention={"time": "1m"},
        emit={"late": "per_arrival"},
    )
    return WindowedAggregator(
        windowing=TimeWindowing(10 * S, 10 * S),
        aggregations=rt.aggregations,
        policy=rt.policy,
        store=TaskStore(path),
        decoder=rt.decoder,
        key_slack=0,
    )


def batch_of(keys: list[str], t0: int) -> EventBatch:
    ks = [k for k in keys for _ in range(3)]
    ts = np.array([t0 + (i % 3) * S for i in range(len(ks))], dtype=np.int64)
    return EventBatch.from_columns(ks, ts, wall_ms=ts)


def stored_keys(agg: WindowedAggregator) -> set[str]:
    found = set()
    for ks in (FRAMES, WINDOWS):
        for k, _ in agg.store.scan_range(ks.all()):
            found.add(ks.parse(k).key)
    return found


def test_expired_keys_are_released_from_memory_and_store(tmp_path: Path) -> None:
    agg = open_agg(tmp_path / "s")
    try:
        for b in range(6):
            agg.add_batch(batch_of([f"k{b}-{i}" for i in range(50)], b * 100 * S))
            agg.timeout(b * 100 * S)
            agg.take_result_batches()
            agg.flush()
        # only the last batch's keys are live (their windows are open): the key table
        # holds at most twice the live keys, the store only theirs
        assert len(agg.keys) <= 2 * 50
        assert stored_keys(agg) == {f"k5-{i}" for i in range(50)}
        # the watermark passes the retention of every key
        agg.add_batch(batch_of([f"later-{i}" for i in range(10)], 1000 * S))
        agg.flush()
        agg.add_batch(batch_of(["latest"], 2000 * S))
        agg.flush()
        assert set(agg.keys.names) <= {"latest"}
        assert len(agg.frames) <= 1 and len(agg.book) == 0 and not agg.book.pending
        assert stored_keys(agg) <= {"latest"}
        # a key that comes back is counted from zero
        agg.add_batch(batch_of(["k0-0"], 3000 * S))
        agg.timeout(END_OF_TIME)
        results = [r for r in agg.get_result() if r.key == "k0-0"]
        assert [(r.kind, r.values["n"]) for r in results] == [(Kind.ON_TIME, 3)]
    finally:
        agg.close()


def test_release_survives_a_restore(tmp_path: Path) -> None:
    agg = open_agg(tmp_path / "s")
    for b in range(3):
        agg.add_batch(batch_of([f"k{b}-{i}" for i in range(20)], b * 100 * S))
        agg.flush()
    agg.close()
    again = open_agg(tmp_path / "s")
    try:
        # a late event of a live key after the restore still updates its window
        again.add_batch(batch_of(["k2-0"], 200 * S))
        again.timeout(END_OF_TIME)
        latest = {(r.key, r.window_start): r for r in again.get_result()}
        assert latest[("k2-0", 200 * S)].values["n"] == 6
    finally:
        again.close()


def test_keys_with_many_frames_are_released_too(tmp_path: Path) -> None:
    """Hopping 60 s / 1 s: every key holds three frames, so the frames refer to each live
    key three times; the key table still keeps to twice the live keys."""
    rt = runtime_for(
        window={"type": "hopping", "size": "60s", "step": "1s"},
        retention={"time": "1m"},
        emit={"late": "per_arrival"},
    )
    agg = WindowedAggregator(
        windowing=TimeWindowing(60 * S, 1 * S),
        aggregations=rt.aggregations,
        policy=rt.policy,
        store=TaskStore(tmp_path / "s"),
        decoder=rt.decoder,
        key_slack=0,
    )
    try:
        for b in range(8):
            agg.add_batch(batch_of([f"k{b}-{i}" for i in range(50)], b * 100 * S))
            agg.timeout(b * 100 * S)
            agg.take_result_batches()
            agg.flush()
            live = np.unique(np.concatenate([agg.frames.live_kids(), agg.book.live_kids()]))
            assert len(agg.frames.live_kids()) >= 2 * len(live)  # several frames per key
            assert len(agg.keys) <= 2 * len(live)
    finally:
        agg.close()
