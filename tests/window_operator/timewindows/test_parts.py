"""The parts of the time-window operator, directly: windowing, trigger, grouping, frames.

Windows of 30 s sliding by 10 s (frames of 10 s); the watermark at 55 s::

    frames      0   10   20   30   40   50   60
    windows     [0, 30) fired   [20, 50) fired   [30, 60) open
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import runtime_for

from stores.rocks import StoreBatch, TaskStore
from window_operator.keytable import KeyTable
from window_operator.timewindows.frame_store import FrameStore
from window_operator.timewindows.grouping import group_by_key_frame
from window_operator.timewindows.trigger import StartRange, TimeTrigger
from window_operator.windows import TimeWindowing

S = 1000


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_windowing_floors_negative_times_and_names_the_frames_of_a_window() -> None:
    w = TimeWindowing(30 * S, 10 * S)
    assert w.frames_per_window == 3
    assert w.frame_of(-1) == -10 * S and w.frame_of(25 * S) == 20 * S
    assert w.first_window_of_frame(20 * S) == 0
    assert (w.floor(25 * S), w.ceil(25 * S)) == (20 * S, 30 * S)


def test_the_trigger_fires_late_marks_and_expires_by_the_watermark() -> None:
    trig = TimeTrigger(TimeWindowing(30 * S, 10 * S), retention=20 * S)
    assert trig.on_time(24 * S, 55 * S) == StartRange(0, 20 * S)  # ends 30..50 passed
    assert trig.on_time(55 * S, 58 * S) is None
    # an event of frame 30 s at watermark 55 s: [10, 40) and [20, 50) fired, [30, 60) is open
    assert trig.late(30 * S, 55 * S)
    assert list(trig.late_windows(30 * S, 55 * S)) == [10 * S, 20 * S]
    assert not trig.late(50 * S, 55 * S)
    # retention 20 s: [0, 30) ended 25 s before 55 s, frame 0 only belongs to expired ones
    assert trig.retained(arr(0, 10 * S), 55 * S).tolist() == [False, True]
    assert trig.expiry_cutoff(55 * S) == 0


def test_grouping_gives_one_group_per_key_and_frame() -> None:
    g = group_by_key_frame(arr(1, 0, 1, 1), arr(0, 10 * S, 0, 20 * S), 10 * S)
    assert list(zip(g.kid.tolist(), g.frame.tolist(), strict=True)) == [
        (0, 10 * S),
        (1, 0),
        (1, 20 * S),
    ]
    assert g.groups.tolist() == [1, 0, 1, 2]


def test_the_frame_store_writes_back_evicts_and_reloads(tmp_path: Path) -> None:
    aggs = runtime_for(aggregations=[{"name": "n", "op": "count"}]).aggregations
    keys: KeyTable[str] = KeyTable()
    with TaskStore(tmp_path / "s") as store:
        frames = FrameStore(aggs, store, keys, 10 * S)
        kids = keys.ids_of(["a", "b"])
        slots, created = frames.resolve(kids, arr(0, 10 * S), np.zeros(2, dtype=np.bool_))
        assert created.all()
        frames.merge(slots, np.array([[3.0], [1.0]]))
        batch = StoreBatch()
        assert frames.persist(batch) == 2
        store.commit(batch)
        assert frames.evict_closed(10 * S) == 1 and len(frames) == 1  # "a"'s frame 0 left
        again, created = frames.resolve(kids[:1], arr(0), np.ones(1, dtype=np.bool_))
        assert not created.any() and frames.acc[again[0]].tolist() == [3.0]
