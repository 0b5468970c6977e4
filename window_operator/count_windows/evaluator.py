"""Count-window values from frames: the windows a batch fills, and the open ones.

Windows that become full in a batch are evaluated per firing key over its frames laid
end to end (the ring's older frames, then the batch's merged ones): each window
combines ``k`` consecutive frames, or, with *deduct* (Jet), is the key's previous window
minus its trailing frame plus the new leading frame, all keys advancing together. Open
windows (EARLY, end of input, queries) all end at their key's last frame: one backward
scan over each key's ring frames gives every suffix, so every open window.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from window_operator.aggset import AggregationSet
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.count_windows.firing import FullWindows, OpenWindows
from window_operator.count_windows.numbering import Numbered
from window_operator.count_windows.ragged import excl_cumsum, ragged_arange
from window_operator.count_windows.ring import Ring

__all__ = ["CountEvaluator", "WindowValues"]

#: Deduct-or-recombine cost model, in units of one row of gather + combine (~20 ns):
#: the fixed cost of a vectorized gather + combine call, and of one deduct wavefront
#: step (about ten NumPy calls), as measured on the hot path.
_COMBINE_CALL_ROWS = 175
_DEDUCT_STEP_ROWS = 1250


@dataclass(frozen=True, slots=True)
class WindowValues:
    """Accumulator rows and object accumulators of some windows (in their order)."""

    acc: FloatArray
    objs: list[list[Any]] | None


@dataclass(frozen=True, slots=True)
class _FrameRows:
    """Each firing key's frames laid end to end: rows, object accumulators, run starts."""

    rows: FloatArray
    objs: list[list[Any]]
    seg_start: IntArray


class CountEvaluator:
    """Evaluates count windows over a :class:`Ring` and a batch's merged frames (reads only).

    ``use_deduct``: ``True`` slides by deduct, ``False`` combines every frame, ``None``
    picks per call whichever is cheaper (deductible operations only).
    """

    def __init__(self, ring: Ring, aggs: AggregationSet, use_deduct: bool | None) -> None:
        self.ring = ring
        self.aggs = aggs
        self.k = ring.k
        self.use_deduct = use_deduct

    # -- windows a batch fills ------------------------------------------------------------

    def full(
        self, num: Numbered, full: FullWindows, merged: FloatArray, g_objs: list[list[Any]]
    ) -> WindowValues:
        """Values of the windows that became full (``merged``: the batch's frame rows)."""
        fr = self._frame_rows(num, full, merged, g_objs)
        w_row = np.repeat(fr.seg_start, full.n_win) + full.index
        acc = self._slide(fr.rows, fr.seg_start, full.n_win, w_row)
        objs = None
        if self.aggs.objects:
            k = self.k
            objs = [self.combine_objects(fr.objs[r : r + k]) for r in w_row.tolist()]
        return WindowValues(acc, objs)

    def _frame_rows(
        self, num: Numbered, full: FullWindows, merged: FloatArray, g_objs: list[list[Any]]
    ) -> _FrameRows:
        """Each firing key's frames from its first firing window on, laid end to end.

        A key's run is its older ring frames ``[first, f0)`` followed by its groups
        (frames ``f0 .. (c1 - 1) // step``).
        """
        k, step, ring = self.k, self.ring.step, self.ring
        keys = full.keys
        f0 = (num.c0 // step)[keys]
        n_ring = f0 - full.first
        n_grp = (num.c1[keys] - 1) // step - f0 + 1
        seg_start = excl_cumsum(n_ring + n_grp)
        total = int((n_ring + n_grp).sum())
        rows = np.empty((total, self.aggs.width), dtype=np.float64)
        ring_off = ragged_arange(n_ring)
        ring_pos = np.repeat(seg_start, n_ring) + ring_off
        ring_kid = np.repeat(num.ukid[keys], n_ring)
        ring_slot = (np.repeat(full.first, n_ring) + ring_off) % k
        rows[ring_pos] = ring.acc[ring_kid, ring_slot]
        grp_off = ragged_arange(n_grp)
        grp_pos = np.repeat(seg_start + n_ring, n_grp) + grp_off
        grp_idx = np.repeat(num.first_group[keys], n_grp) + grp_off
        rows[grp_pos] = merged[grp_idx]
        row_objs: list[list[Any]] = []
        if self.aggs.objects:
            row_objs = [[] for _ in range(total)]
            ring_objs = ring.objects_at(ring_kid, ring_slot)
            for p, o in zip(ring_pos.tolist(), ring_objs, strict=True):
                row_objs[p] = o
            for p, g in zip(grp_pos.tolist(), grp_idx.tolist(), strict=True):
                row_objs[p] = g_objs[g]
        return _FrameRows(rows, row_objs, seg_start)

    def _deduct_pays(self, n_keys: int, n_windows: int, depth: int) -> bool:
        """Whether the deduct wavefront is cheaper than recombining every window."""
        if self.use_deduct is not None:
            return self.use_deduct
        # Deduct touches fewer rows but takes one step per window of the busiest key.
        k = self.k
        recombine = (k - 1) * (_COMBINE_CALL_ROWS + n_windows)
        wave = (
            (k - 1) * (_COMBINE_CALL_ROWS + n_keys)
            + (depth - 1) * _DEDUCT_STEP_ROWS
            + 3 * (n_windows - n_keys)
        )
        return self.aggs.deductible and wave < recombine

    def _slide(
        self, rows: FloatArray, seg_start: IntArray, nw: IntArray, w_row: IntArray
    ) -> FloatArray:
        """Window values: ``k`` consecutive rows combined, or Jet's deduct wavefront."""
        aggs, k = self.aggs, self.k
        if not aggs.width:
            return np.empty((len(w_row), 0), dtype=np.float64)
        depth = int(nw.max())
        n_windows = len(w_row)
        if not self._deduct_pays(len(nw), n_windows, depth):
            out = rows[w_row]
            for j in range(1, k):
                out = aggs.combine(out, rows[w_row + j])
            return out
        # Jet: the next window of a key is the previous one minus its trailing frame
        # plus the new leading frame; all keys advance together.
        run = rows[seg_start]
        for j in range(1, k):
            run = aggs.combine(run, rows[seg_start + j])
        first_out = excl_cumsum(nw)
        out = np.empty((n_windows, aggs.width), dtype=np.float64)
        out[first_out] = run
        for i in range(1, depth):
            sel = np.flatnonzero(nw > i)
            at = seg_start[sel] + i
            step_run, lost = aggs.deduct_checked(run[sel], rows[at - 1])
            step_run = aggs.combine(step_run, rows[at + k - 1])
            if len(lost):  # cancelled: these windows are combined from their rows
                step_run[lost] = aggs.combine_all([rows[at[lost] + j] for j in range(k)])
            run[sel] = step_run
            out[first_out[sel] + i] = step_run
        return out

    def combine_objects(self, frames: Sequence[list[Any]]) -> list[Any]:
        """The object accumulators of a window from its frames'."""
        acc = self.aggs.create_objects()
        for objs in frames:
            acc = self.aggs.combine_objects(acc, objs)
        return acc

    # -- open windows ---------------------------------------------------------------------

    def open_values(self, wins: OpenWindows) -> WindowValues:
        """Values of open windows: their frames up to the last one with messages.

        The open windows of a key all end at its last frame, so each is a suffix of the
        key's frames: one backward scan per key (a combine per frame, all keys at once)
        serves them all, where combining each window's frames took ``k`` per window.
        """
        runs = _Runs.of(wins)
        kids, frames = runs.frames()
        slots = frames % self.k
        aggs = self.aggs
        acc = np.empty((len(wins), 0), dtype=np.float64)
        if aggs.width:
            suffix = self.ring.acc[kids, slots]
            for at in runs.backwards():
                suffix[at] = aggs.combine(suffix[at], suffix[at + 1])
            acc = suffix[runs.at(wins)]
        objs: list[list[Any]] | None = None
        if aggs.objects:
            suffix_objs = self.ring.objects_at(kids, slots)
            for at in runs.backwards():
                for i in at.tolist():
                    suffix_objs[i] = aggs.combine_objects(suffix_objs[i], suffix_objs[i + 1])
            # a run's last frame is the ring's own accumulator: a window of it alone
            # gets a copy (a user's finish may keep or change what it is given)
            last = set(runs.ends().tolist())
            fresh = aggs.create_objects
            objs = [
                aggs.combine_objects(fresh(), suffix_objs[i]) if i in last else suffix_objs[i]
                for i in runs.at(wins).tolist()
            ]
        return WindowValues(acc, objs)

    def marked(self, wins: OpenWindows, flag: BoolArray) -> BoolArray:
        """Which open windows hold a frame marked in ``flag`` (a ring mark array)."""
        runs = _Runs.of(wins)
        kids, frames = runs.frames()
        marks = np.cumsum(flag[kids, frames % self.k], dtype=np.int64)
        at, end = runs.at(wins), runs.ends()[runs.run_of]
        before = np.where(at > 0, marks[at - 1], 0)
        out: BoolArray = marks[end] > before
        return out


@dataclass(frozen=True, slots=True)
class _Runs:
    """The frames of some open windows' keys laid end to end, a run per key: from the
    key's earliest window start to its last frame (which every window of it ends at)."""

    kids: IntArray
    first: IntArray
    lengths: IntArray
    starts: IntArray
    #: each window's run
    run_of: IntArray

    @classmethod
    def of(cls, wins: OpenWindows) -> _Runs:
        kids, run_of = np.unique(wins.kids, return_inverse=True)
        first = np.full(len(kids), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, run_of, wins.starts)
        last = np.empty(len(kids), dtype=np.int64)
        last[run_of] = wins.last
        lengths = np.maximum(last - first + 1, 0)
        return cls(kids, first, lengths, excl_cumsum(lengths), run_of)

    def frames(self) -> tuple[IntArray, IntArray]:
        """Each laid-out frame's key id and frame number."""
        return (
            np.repeat(self.kids, self.lengths),
            np.repeat(self.first, self.lengths) + ragged_arange(self.lengths),
        )

    def ends(self) -> IntArray:
        """Where each run's last frame lies."""
        out: IntArray = self.starts + self.lengths - 1
        return out

    def at(self, wins: OpenWindows) -> IntArray:
        """Where each window's first frame lies."""
        out: IntArray = self.starts[self.run_of] + wins.starts - self.first[self.run_of]
        return out

    def backwards(self) -> Iterator[IntArray]:
        """For ``d`` = 1, 2, ...: where the frames ``d`` before their run's end lie, all
        runs at once (so each comes after the frame that follows it)."""
        ends = self.ends()
        for d in range(1, int(self.lengths.max(initial=0))):
            yield ends[self.lengths > d] - d
