"""Pre-aggregation groups of a batch: one group per distinct (key, frame)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from window_operator.arrays import IntArray

__all__ = ["FrameGroups", "group_by_key_frame"]


@dataclass(frozen=True, slots=True)
class FrameGroups:
    """``groups[i]`` is event ``i``'s group; group ``g`` is ``(kid[g], frame[g])``."""

    groups: IntArray
    kid: IntArray
    frame: IntArray

    def __len__(self) -> int:
        return len(self.kid)


def group_by_key_frame(kids: IntArray, frames: IntArray, step: int) -> FrameGroups:
    """Group events by (key id, frame start), groups ordered by (key, frame)."""
    fmin = int(frames.min())
    span = (int(frames.max()) - fmin) // step + 1
    nk = int(kids.max()) + 1
    if nk * span <= 8 * len(kids) + 4096:
        # dense: a presence table over (key, frame) beats sorting the batch
        code = kids * span + (frames - fmin) // step
        present = np.zeros(nk * span, dtype=np.bool_)
        present[code] = True
        ucode = np.flatnonzero(present)
        rank = np.cumsum(present, dtype=np.int64) - 1
        groups = rank[code]
        g_kid = ucode // span
        g_frame = (ucode % span) * step + fmin
    elif nk * span < 2**62:
        code = kids * span + (frames - fmin) // step
        ucode, groups = np.unique(code, return_inverse=True)
        g_kid = ucode // span
        g_frame = (ucode % span) * step + fmin
    else:  # astronomically sparse batch: fall back to a lexicographic sort
        order = np.lexsort((frames, kids))
        sk, sf = kids[order], frames[order]
        starts = np.concatenate(([True], (sk[1:] != sk[:-1]) | (sf[1:] != sf[:-1])))
        gid_sorted = np.cumsum(starts) - 1
        groups = np.empty_like(gid_sorted)
        groups[order] = gid_sorted
        g_kid, g_frame = sk[starts], sf[starts]
    return FrameGroups(groups.astype(np.int64, copy=False), g_kid, g_frame)
