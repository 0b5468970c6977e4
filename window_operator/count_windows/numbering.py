"""Numbering a batch's messages per key (arrival order) and grouping them per frame.

A key's messages are numbered ``0, 1, 2, ...`` across batches; message ``n`` belongs to
frame ``n // step``. A batch's events of one key are consecutive numbers starting at the
key's count before the batch, so they fill that key's current frame and then whole new
frames in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from window_operator.arrays import IntArray
from window_operator.count_windows.ragged import ragged_arange

__all__ = ["Numbered", "number"]


@dataclass(frozen=True, slots=True)
class Numbered:
    """A batch's accepted events numbered per key and grouped per (key, frame).

    Touched keys (``ukid``, ascending) have counts ``c0`` before and ``c1`` after the
    batch; groups are ordered by (key, frame) and every frame between a key's first
    and last group has one (messages are consecutive).
    """

    #: message index of each event (input order)
    n: IntArray
    #: group of each event (input order)
    groups: IntArray
    g_kid: IntArray
    g_frame: IntArray
    #: index into ``ukid`` of each group
    g_key: IntArray
    ukid: IntArray
    c0: IntArray
    c1: IntArray
    #: first group of each touched key
    first_group: IntArray


def number(kids: IntArray, counts: IntArray, n_keys: int, step: int) -> Numbered:
    """Message indices per key (arrival order) and (key, frame) groups.

    ``counts[kid]`` is each key's message count before the batch; ``n_keys`` bounds the
    key ids (a narrower sort key is faster when they fit).
    """
    m = len(kids)
    # a stable sort keeps each key's events in arrival order
    sort_kids = kids.astype(np.int16) if n_keys < 2**15 else kids
    order = np.argsort(sort_kids, kind="stable")
    sk = kids[order]
    new_key = np.ones(m, dtype=np.bool_)
    new_key[1:] = sk[1:] != sk[:-1]
    key_start = np.flatnonzero(new_key)
    ukid = sk[key_start]
    per_key = np.diff(np.append(key_start, m))
    c0 = counts[ukid]
    n_sorted = np.repeat(c0, per_key) + ragged_arange(per_key)
    f_sorted = n_sorted // step
    new_group = new_key.copy()
    new_group[1:] |= f_sorted[1:] != f_sorted[:-1]
    g_start = np.flatnonzero(new_group)
    gid_sorted = np.cumsum(new_group, dtype=np.int64) - 1
    groups = np.empty(m, dtype=np.int64)
    groups[order] = gid_sorted
    n = np.empty(m, dtype=np.int64)
    n[order] = n_sorted
    key_of_sorted = np.cumsum(new_key, dtype=np.int64) - 1
    return Numbered(
        n=n,
        groups=groups,
        g_kid=sk[g_start],
        g_frame=f_sorted[g_start],
        g_key=key_of_sorted[g_start],
        ukid=ukid,
        c0=c0,
        c1=c0 + per_key,
        first_group=gid_sorted[key_start],
    )
