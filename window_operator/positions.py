"""Input positions: the offsets that make replays recognisable.

Every operator keeps the last applied offset of each input partition (checkpointed
with its state). A record at or below it — or at or below an earlier record of the
same batch — is a replay and a no-op. Library users may leave offsets out (``-1``):
they get the next offsets of their partition.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

__all__ = ["assign_offsets", "fresh_mask"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def assign_offsets(last: Mapping[int, int], part: IntArray, off: IntArray) -> IntArray:
    """Replace ``-1`` offsets by the next offsets of their partition, in batch order."""
    auto = off < 0
    if not auto.any():
        return off
    off = off.copy()
    for p in np.unique(part[auto]).tolist():
        in_p = part == p
        if (auto | ~in_p).all():
            # the usual case: no explicit offsets in this partition
            idx = np.flatnonzero(in_p)
            off[idx] = last.get(p, -1) + 1 + np.arange(len(idx))
            continue
        nxt = last.get(p, -1) + 1
        for i in np.flatnonzero(in_p).tolist():
            if off[i] < 0:
                off[i] = nxt
            nxt = max(nxt, int(off[i]) + 1)
    return off


def fresh_mask(last: Mapping[int, int], part: IntArray, off: IntArray) -> BoolArray:
    """Rows whose offset is above everything applied before them (the rest are replays)."""
    fresh = np.empty(len(off), dtype=np.bool_)
    for p in np.unique(part).tolist():
        m = part == p
        o = off[m]
        prev = np.maximum.accumulate(np.concatenate(([last.get(p, -1)], o[:-1])))
        fresh[m] = o > prev
    return fresh
