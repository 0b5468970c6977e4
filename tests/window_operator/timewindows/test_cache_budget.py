"""The frame store's memory budget: open frames beyond it are spilled to the store and
read back to merge, fire or emit EARLY; results are those of an unbounded cache (issue:
churn).

Workload: 400 keys, 40 micro-batches of 2 s of event time, a tenth of the events up to
15 s late, hopping 30 s / 10 s windows with a full-state median, EARLY every 5 s, LATE
per arrival; the bounded operator keeps about 50 open frames in memory (of over a
thousand) and is restored halfway.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from churnkit import random_batches, side_by_side, three_each
from helpers import runtime_for

from stores.rocks import StoreBatch, TaskStore
from window_operator.events import EventBatch
from window_operator.job import JobRuntime
from window_operator.results import WindowResult
from window_operator.timewindows import WindowedAggregator


def runtime(objects: bool = True) -> JobRuntime:
    """With ``objects`` a full-state median too (frames then load one by one, not in bulk)."""
    median = [{"name": "median", "op": "median", "field": "v"}] if objects else []
    return runtime_for(
        window={"type": "hopping", "size": "30s", "step": "10s"},
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "mean", "op": "mean", "field": "v"},
            *median,
        ],
        watermark={"allowed_lateness": "2s"},
        emit={"early": "5s", "late": "per_arrival"},
        retention={"time": "1m"},
    )


def open_agg(rt: JobRuntime, path: Path, budget_frames: int | None) -> WindowedAggregator:
    agg = rt.operator(TaskStore(path))
    assert isinstance(agg, WindowedAggregator)
    if budget_frames is not None:
        agg.frames.max_bytes = budget_frames * agg.frames.slot_bytes
    return agg


def spilled_within_budget(agg: WindowedAggregator) -> int:
    frames = agg.frames
    open_from = agg.trigger.evictable_before(agg.watermark)
    assert frames.max_bytes is not None and frames.open_bytes(open_from) <= frames.max_bytes
    return int(frames.spilled_upto is not None)


@pytest.mark.parametrize(("seed", "objects"), [(1, True), (2, True), (3, False), (4, False)])
def test_a_small_budget_spills_and_changes_no_result(
    tmp_path: Path, seed: int, objects: bool
) -> None:
    rt = runtime(objects)
    spills = side_by_side(
        open_agg(rt, tmp_path / "free", None),
        lambda: open_agg(rt, tmp_path / "tight", 50),
        random_batches(seed, keys=400, per_batch=200),
        spilled_within_budget,
    )
    assert spills > 10


def test_reading_back_frames_already_in_memory_loads_none(tmp_path: Path) -> None:
    """Bulk read-back (no object accumulators) of a range whose frames are all in memory,
    with free slots from evicted frames: nothing is loaded and the free slots stay."""
    agg = open_agg(runtime(objects=False), tmp_path / "s", None)
    for batch in random_batches(5, keys=50, per_batch=100, count=10):
        agg.add_batch(batch)
        agg.timeout(int(batch.ts.max()))
        agg.take_result_batches()
        agg.flush()
    frames = agg.frames
    free = list(frames.free)
    assert free, "closed frames were evicted: their slots are free"
    open_from = agg.trigger.evictable_before(agg.watermark)
    in_memory = int(((frames.kid >= 0) & (frames.frame >= open_from)).sum())
    assert in_memory > 0
    assert frames.load_range(open_from) == 0
    assert frames.free == free
    assert int(((frames.kid >= 0) & (frames.frame >= open_from)).sum()) == in_memory


def test_a_spilled_frame_is_written_only_when_its_stored_record_is_stale(tmp_path: Path) -> None:
    """Spilling writes a frame back only if the store's record of it is not current: a
    frame read back and spilled again unchanged costs no write (nor changelog record);
    one whose EARLY mark changed since is written."""
    agg = open_agg(runtime(objects=False), tmp_path / "s", None)
    frames = agg.frames

    def persist() -> int:
        batch = StoreBatch()
        written = frames.persist(batch)
        frames.store.commit(batch)
        return written

    agg.add_batch(three_each([f"k{i}" for i in range(40)], 0))
    assert persist() == 40, "every new frame is written"
    open_from = agg.trigger.evictable_before(agg.watermark)
    frames.max_bytes = 20 * frames.slot_bytes

    def spill() -> int:
        victims = frames.select_spill(open_from)
        assert len(victims) == 40 - 15, "down to 75 % of a 20-frame budget"
        written = persist()
        frames.release_many(victims)
        return written

    assert spill() == 0, "the store holds these frames as they are"
    assert frames.unspill(open_from, 0) == 25
    assert spill() == 0, "read back and spilled again unchanged: nothing to write"
    assert frames.unspill(open_from, 0) == 25
    frames.clear_early()  # EARLY results went out: every mark in memory changed
    # the 25 spilled and the 15 kept: each stored record still has its EARLY mark
    assert spill() == 40


def test_live_state_counts_the_spilled_frames_too(tmp_path: Path) -> None:
    """The live-state gauges of a bounded operator equal an unbounded one's after every
    flush (and after a restore), while open frames live in the store only."""
    rt = runtime(objects=False)
    free = open_agg(rt, tmp_path / "free", None)

    def same_live_state(tight: WindowedAggregator) -> int:
        assert tight.live_state() == free.live_state()
        assert tight.live_state(first_start=0) == free.live_state(first_start=0)
        return int(tight.frames.spilled_upto is not None)

    batches = random_batches(6, keys=400, per_batch=200)
    tight = lambda: open_agg(rt, tmp_path / "tight", 50)  # noqa: E731
    assert side_by_side(free, tight, batches, same_live_state) > 10


def test_early_results_read_back_only_the_spilled_frames_of_the_keys_that_changed(
    tmp_path: Path,
) -> None:
    """400 cold keys' open frames are spilled, then only 5 hot keys change: an EARLY pass
    of the hot keys alone reads back their frames, not the cold ones (which it used to
    read every time). Results equal an unbounded operator's to the last bit."""
    rt = runtime(objects=False)
    cold = [f"cold{i}" for i in range(400)]
    hot = [f"hot{i}" for i in range(5)]
    batches = [three_each(cold, 0)] + [three_each(hot, b * 2_000) for b in range(1, 8)]
    side_by_side(
        open_agg(rt, tmp_path / "free", None),
        lambda: open_agg(rt, tmp_path / "tight", 50),
        batches,
        spilled_within_budget,
    )
    agg = open_agg(rt, tmp_path / "counted", 50)
    read_back: list[int] = []
    load, load_range = agg.frames.load, agg.frames.load_range

    def counted_load(pairs: Sequence[tuple[int, int]]) -> list[int]:
        slots = load(pairs)
        read_back.append(sum(s >= 0 for s in slots))
        return slots

    def counted_range(frame_from: int, frame_to: int | None = None) -> int:
        read_back.append(load_range(frame_from, frame_to))
        return read_back[-1]

    agg.frames.load = counted_load  # type: ignore[method-assign]
    agg.frames.load_range = counted_range  # type: ignore[method-assign]
    hot_passes = []
    for batch in batches:
        read_back.clear()
        kinds = Counter(r.kind.value for r in step_results(agg, batch))
        if kinds == {"EARLY": 3 * len(hot)}:  # an EARLY pass of the hot keys alone
            held = {agg.keys.names[k] for k in agg.frames.kid[agg.frames.kid >= 0].tolist()}
            cold_spilled = sum(c not in held for c in cold)  # their open frames: stored only
            hot_passes.append((sum(read_back), cold_spilled))
    assert hot_passes, "the scenario has an EARLY pass of the hot keys alone"
    for read, cold_spilled in hot_passes:
        assert cold_spilled > 300 and read <= 2 * len(hot), (read, cold_spilled)


def step_results(agg: WindowedAggregator, batch: EventBatch) -> list[WindowResult]:
    agg.add_batch(batch)
    agg.timeout(int(batch.ts.max()))
    out = agg.get_result()
    agg.flush()
    return out


def test_without_early_results_spilled_frames_leave_no_trace(tmp_path: Path) -> None:
    """Without EARLY results nothing is kept of a spilled frame's EARLY mark (it would
    grow with every spill and hold its key in the key table)."""
    rt = runtime_for(
        window={"type": "hopping", "size": "30s", "step": "10s"},
        aggregations=[{"name": "n", "op": "count"}],
        watermark={"allowed_lateness": "2s"},
        retention={"time": "1m"},
    )
    agg = open_agg(rt, tmp_path / "s", 50)
    spills = 0
    for batch in random_batches(7, keys=400, per_batch=200):
        step_results(agg, batch)
        spills += agg.frames.spilled_upto is not None
        assert len(agg.frames.early_spilled_kid) == 0
    assert spills > 10
    agg.close()
