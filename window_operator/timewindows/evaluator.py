"""Window values from frames: dense sliding over (keys x frames) grids, or gathering.

Firing many windows at once builds, per chunk of window starts, a dense grid of the
touched keys' frames and slides over it: with *deduct* (Jet) each next window is the
previous one minus its trailing frame plus the new leading frame, otherwise the frames
of each window are combined. Single windows (LATE updates, queries) are evaluated by
gathering their frames, loading evicted ones from the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from window_operator.aggset import AggregationSet
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.timewindows.frame_store import FrameStore
from window_operator.timewindows.spilled import spilled_frame_numbers
from window_operator.timewindows.trigger import StartRange

__all__ = ["Evaluated", "WindowEvaluator"]

#: Windows evaluated together when firing; bounds the dense working set.
_CHUNK_WINDOWS = 32


@dataclass(frozen=True, slots=True)
class Evaluated:
    """Values of existing windows: key ids, starts, accumulator rows, object accumulators."""

    kids: IntArray
    starts: IntArray
    acc: FloatArray
    objs: list[list[Any]] | None


class WindowEvaluator:
    """Evaluates windows of one job's shape over a :class:`FrameStore` (reads only)."""

    def __init__(
        self, frames: FrameStore, aggs: AggregationSet, size: int, step: int, use_deduct: bool
    ) -> None:
        self.frames = frames
        self.aggs = aggs
        self.size = size
        self.step = step
        self.k = size // step
        self.use_deduct = use_deduct

    def dense(self, starts: StartRange, mark: BoolArray | None) -> Iterator[Evaluated]:
        """Every existing window with a start in ``starts``, chunk by chunk.

        With ``mark`` only windows containing a marked frame are wanted; unmarked frames
        of those windows still contribute.
        """
        fc = self.frames
        size, step = self.size, self.step
        w_lo, w_hi = starts.lo, starts.hi
        f_lo = max(w_lo, NO_WATERMARK)
        f_hi = w_hi + size - step if w_hi < END_OF_TIME else END_OF_TIME
        sel = np.flatnonzero((fc.kid >= 0) & (fc.frame >= f_lo) & (fc.frame <= f_hi))
        if mark is not None:
            marked = sel[mark[sel]]
            if not len(marked):
                return
            mf = fc.frame[marked]
            w_lo = max(w_lo, int(mf.min()) - size + step)
            w_hi = min(w_hi, int(mf.max()))
            sel = sel[(fc.frame[sel] >= w_lo) & (fc.frame[sel] <= w_hi + size - step)]
        if not len(sel):
            return
        frames = fc.frame[sel]
        ufr = np.unique(frames)
        if mark is not None:
            # Frames of keys without a mark may be spilled (only the marked keys' were read
            # back): the windows are cut into chunks where every key's frames are, as with
            # all of them in memory, so that the budget cannot change a float's rounding.
            ufr = np.union1d(ufr, spilled_frame_numbers(fc, w_lo, w_hi + size - step))
        c = max(w_lo, int(ufr[0]) - size + step)
        last_w = min(w_hi, int(ufr[-1]))
        while c <= last_w:
            c_hi = min(last_w, c + (_CHUNK_WINDOWS - 1) * step)
            in_chunk = (frames >= c) & (frames <= c_hi + size - step)
            if in_chunk.any():
                out = self._chunk(sel[in_chunk], c, c_hi, mark)
                if out is not None:
                    yield out
            c = c_hi + step
            pos = int(np.searchsorted(ufr, c))
            if pos >= len(ufr):
                break
            c = max(c, int(ufr[pos]) - size + step)

    def _chunk(
        self, slots: IntArray, c_lo: int, c_hi: int, mark: BoolArray | None
    ) -> Evaluated | None:
        fc = self.frames
        step, k = self.step, self.k
        n_w = (c_hi - c_lo) // step + 1
        length = n_w + k - 1
        ukid, row = np.unique(fc.kid[slots], return_inverse=True)
        col = (fc.frame[slots] - c_lo) // step
        nk = len(ukid)
        present = np.zeros((nk, length), dtype=np.bool_)
        present[row, col] = True
        exists = _window_any(present, k, n_w)
        if mark is not None:
            mk = np.zeros((nk, length), dtype=np.bool_)
            mk[row, col] = mark[slots]
            exists &= _window_any(mk, k, n_w)
        r_idx, w_idx = np.nonzero(exists)
        if not len(r_idx):
            return None
        width = self.aggs.width
        acc_out = np.empty((len(r_idx), width))
        if width:
            grid = np.empty((nk, length, width))
            grid[:] = self.aggs.identity
            grid[row, col] = fc.acc[slots]
            acc_out = self._slide(grid, n_w)[r_idx, w_idx]
        objs_out: list[list[Any]] | None = None
        if self.aggs.objects:
            slot_grid = np.full((nk, length), -1, dtype=np.int64)
            slot_grid[row, col] = slots
            objs_out = [
                self.combine_objects(slot_grid[r, w : w + k].tolist())
                for r, w in zip(r_idx.tolist(), w_idx.tolist(), strict=True)
            ]
        starts = c_lo + w_idx.astype(np.int64) * step
        return Evaluated(ukid[r_idx], starts, acc_out, objs_out)

    def _slide(self, grid: FloatArray, n_w: int) -> FloatArray:
        """Window values from a ``(keys, frames, width)`` grid: frames combined k at a time."""
        aggs, k = self.aggs, self.k
        nk, _, width = grid.shape
        if k == 1:
            return grid
        if self.use_deduct:
            out = np.empty((nk, n_w, width))
            run = grid[:, 0]
            for j in range(1, k):
                run = aggs.combine(run, grid[:, j])
            out[:, 0] = run
            for i in range(1, n_w):
                run, lost = aggs.deduct_checked(run, grid[:, i - 1])
                run = aggs.combine(run, grid[:, i + k - 1])
                if len(lost):  # cancelled: these windows are combined from their frames
                    run[lost] = aggs.combine_all([grid[lost, i + j] for j in range(k)])
                out[:, i] = run
            return out
        flat = grid[:, 0:n_w].reshape(-1, width)
        for j in range(1, k):
            flat = aggs.combine(flat, np.ascontiguousarray(grid[:, j : j + n_w]).reshape(-1, width))
        result: FloatArray = flat.reshape(nk, n_w, width)
        return result

    def combine_objects(self, slots: list[int]) -> list[Any]:
        """The object accumulators of a window from its frames' slots (``-1``: none)."""
        objs = self.frames.objs
        acc = self.aggs.create_objects()
        for s in slots:
            if s >= 0:
                o = objs[s]
                assert o is not None
                acc = self.aggs.combine_objects(acc, o)
        return acc

    def gather(
        self, windows: Sequence[tuple[int, int]]
    ) -> tuple[FloatArray, list[list[Any]] | None, list[bool]]:
        """Values of specific ``(kid, start)`` windows, loading evicted frames.

        Returns accumulator rows, object accumulators and whether each window exists.
        """
        step, k = self.step, self.k
        pairs = [(kid, w + j * step) for kid, w in windows for j in range(k)]
        slots = np.asarray(self.frames.get_or_load(pairs), dtype=np.int64).reshape(-1, k)
        has_frame: BoolArray = np.any(slots >= 0, axis=1)
        n = len(windows)
        acc = self.aggs.identity_rows(n)
        for j in range(k):
            s = slots[:, j]
            have = s >= 0
            if have.any():
                acc[have] = self.aggs.combine(acc[have], self.frames.acc[s[have]])
        objs = None
        if self.aggs.objects:
            objs = [self.combine_objects(slots[i].tolist()) for i in range(n)]
        return acc, objs, [bool(x) for x in has_frame]


def _window_any(present: BoolArray, k: int, n_w: int) -> BoolArray:
    """``out[:, i]`` = any of ``present[:, i:i+k]``."""
    cs = np.zeros((present.shape[0], present.shape[1] + 1), dtype=np.int64)
    np.cumsum(present, axis=1, out=cs[:, 1:])
    result: BoolArray = (cs[:, k : k + n_w] - cs[:, 0:n_w]) > 0
    return result
