"""Ragged runs laid end to end: the index arithmetic of per-key variable-length runs."""

from __future__ import annotations

import numpy as np

from window_operator.arrays import IntArray

__all__ = ["excl_cumsum", "ragged_arange"]


def excl_cumsum(lengths: IntArray) -> IntArray:
    """Start of each run when runs of ``lengths`` are laid end to end."""
    out = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def ragged_arange(lengths: IntArray) -> IntArray:
    """``concatenate([arange(n) for n in lengths])`` without the Python loop."""
    total = int(lengths.sum())
    starts = excl_cumsum(lengths)
    result: IntArray = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    return result
