"""Read-only questions to the store about frames spilled beyond the memory budget.

Spilled open frames (at or before :attr:`FrameStore.spilled_upto`) may be in the store
only. The live-state gauges count them, and EARLY results cut their windows into the
chunks an unbounded cache would (so a budget cannot change a float's rounding): both ask
the store without loading anything into the frame store.
"""

from __future__ import annotations

import numpy as np

from window_operator.arrays import IntArray
from window_operator.timewindows.frame_store import FrameStore
from window_operator.timewindows.state import FRAMES

__all__ = ["spilled_frame_numbers", "spilled_frames"]


def spilled_frames(fs: FrameStore, frame_from: int) -> tuple[IntArray, IntArray]:
    """Key ids and frames of the stored frames with ``frame_from <= frame <=
    spilled_upto`` (a key the key table does not hold gets an id past its end, one per
    key; the table is not changed)."""
    if fs.spilled_upto is None or frame_from > fs.spilled_upto:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rng = FRAMES.times(frame_from, fs.spilled_upto + 1)
    found = [k for k, _ in fs.store.scan_range(rng, fill_cache=False)]
    frames, names = FRAMES.parse_many(found)
    ids, unknown = fs.keys.ids, len(fs.keys)
    other: dict[str, int] = {}
    kids = [ids[n] if n in ids else other.setdefault(n, unknown + len(other)) for n in names]
    return np.asarray(kids, dtype=np.int64), frames


def spilled_frame_numbers(fs: FrameStore, lo: int, hi: int) -> IntArray:
    """The frame numbers in ``[lo, hi]`` (and at or before ``spilled_upto``) that the
    store holds a frame of, whichever key (one seek per frame number)."""
    if fs.spilled_upto is None:
        return np.zeros(0, dtype=np.int64)
    step = fs.step
    first = -(-lo // step) * step
    found = [
        f
        for f in range(first, min(hi, fs.spilled_upto) + 1, step)
        if next(iter(fs.store.scan_range(FRAMES.times(f, f + 1), fill_cache=False)), None)
        is not None
    ]
    return np.asarray(found, dtype=np.int64)
