"""The Window Meta Store's time metadata: per input and event-time frame, the count,
time and position bounds of its messages; and the per-prefix expiry index of key-first
layouts (which join keys have messages in which expiry bucket).
"""

from __future__ import annotations

import struct

import numpy as np

from stores.keys import MIN_I64, decode_i64, encode_i64, prefix_upper_bound, ts_range
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.join.common import IntArray
from window_operator.join.layouts import MSG_TAG

__all__ = ["SweepIndex", "WindowFrames"]

_WINDOW_TAG = b"W"
_SWEEP_TAG = b"X"
_WMETA = struct.Struct(">qqqqq")


class WindowFrames:
    """Window metadata per ``(side, frame)``: ``[count, min_ts, max_ts, min_pos, max_pos]``.

    Frames are tumbling, ``frame_ms`` long; a message belongs to the one that includes
    it. Stored under ``W <side> i64(frame)``.
    """

    def __init__(self, frame_ms: int) -> None:
        self.frame_ms = frame_ms
        self.meta: dict[tuple[int, int], list[int]] = {}
        self.dirty: set[tuple[int, int]] = set()

    def note(self, side: int, ts: IntArray, pos: IntArray) -> None:
        """Count new messages of ``side`` into their frames."""
        frame = self.frame_ms
        frames = ts - ts % frame
        order = np.argsort(frames, kind="stable")
        sf, st, sp = frames[order], ts[order], pos[order]
        starts = np.flatnonzero(np.concatenate(([True], sf[1:] != sf[:-1])))
        counts = np.diff(np.append(starts, len(sf)))
        mins, maxs = np.minimum.reduceat(st, starts), np.maximum.reduceat(st, starts)
        pmins, pmaxs = np.minimum.reduceat(sp, starts), np.maximum.reduceat(sp, starts)
        for f, c, t0, t1, p0, p1 in zip(
            sf[starts].tolist(),
            counts.tolist(),
            mins.tolist(),
            maxs.tolist(),
            pmins.tolist(),
            pmaxs.tolist(),
            strict=True,
        ):
            kw = (side, f)
            m = self.meta.get(kw)
            if m is None:
                self.meta[kw] = [c, t0, t1, p0, p1]
            else:
                m[0] += c
                m[1], m[2] = min(m[1], t0), max(m[2], t1)
                m[3], m[4] = min(m[3], p0), max(m[4], p1)
            self.dirty.add(kw)

    def write(self, batch: StoreBatch) -> None:
        """Persist the changed frames."""
        for side, f in sorted(self.dirty):
            m = self.meta.get((side, f))
            if m is not None:
                key = _WINDOW_TAG + MSG_TAG[side] + encode_i64(f)
                batch.put(ColumnFamily.WINDOW_META, key, _WMETA.pack(*m))
        self.dirty.clear()

    def expire(self, side: int, cut: int, batch: StoreBatch) -> None:
        """Drop the frames of ``side`` that end at or before ``cut``."""
        frame = self.frame_ms
        w_tag = _WINDOW_TAG + MSG_TAG[side]
        batch.delete_range(ColumnFamily.WINDOW_META, *ts_range(w_tag, MIN_I64, cut - frame + 1))
        for kw in [kw for kw in self.meta if kw[0] == side and kw[1] + frame <= cut]:
            del self.meta[kw]
            self.dirty.discard(kw)

    def restore(self, side: int, store: TaskStore) -> None:
        """Load the persisted frames of ``side``."""
        w_tag = _WINDOW_TAG + MSG_TAG[side]
        for k, v in store.scan(ColumnFamily.WINDOW_META, w_tag, prefix_upper_bound(w_tag)):
            self.meta[(side, decode_i64(k, 2))] = list(_WMETA.unpack(v))


class SweepIndex:
    """Which join keys have messages in which ``sweep_ms`` bucket, per side.

    Key-first layouts expire by one range delete per join key and bucket. Stored under
    ``X <side> i64(bucket) <equal_flds>``.
    """

    def __init__(self, sweep_ms: int) -> None:
        self.sweep_ms = sweep_ms
        self.buckets: tuple[dict[int, set[bytes]], dict[int, set[bytes]]] = ({}, {})
        self.new: list[bytes] = []

    def note(self, side: int, kids: IntArray, ts: IntArray, encoded: list[bytes]) -> None:
        """Record which join keys have messages in which expiry bucket."""
        buckets = ts // self.sweep_ms
        index = self.buckets[side]
        tag = _SWEEP_TAG + MSG_TAG[side]
        b_lo, b_hi = int(buckets.min()), int(buckets.max())
        for bucket in range(b_lo, b_hi + 1):
            sel = kids if b_lo == b_hi else kids[buckets == bucket]
            if not len(sel):
                continue
            prefixes = index.get(bucket)
            if prefixes is None:
                prefixes = index[bucket] = set()
            new = set(map(encoded.__getitem__, sel.tolist())) - prefixes
            if new:
                prefixes |= new
                head = tag + encode_i64(bucket)
                self.new.extend(head + p for p in sorted(new))

    def write(self, batch: StoreBatch) -> None:
        """Persist the new index entries."""
        batch.put_many(ColumnFamily.WINDOW_META, self.new, [b""] * len(self.new))
        self.new = []

    def expire(self, side: int, cut: int, batch: StoreBatch) -> None:
        """Key-first layout: one range delete per join key of each expired bucket."""
        g = self.sweep_ms
        index = self.buckets[side]
        done = sorted(b for b in index if (b + 1) * g <= cut)
        if not done:
            return
        prefixes: set[bytes] = set()
        for b in done:
            prefixes |= index.pop(b)
        tag = MSG_TAG[side]
        for prefix in sorted(prefixes):
            batch.delete_range(ColumnFamily.MESSAGES, *ts_range(tag + prefix, MIN_I64, cut))
        x_tag = _SWEEP_TAG + tag
        batch.delete_range(ColumnFamily.WINDOW_META, *ts_range(x_tag, MIN_I64, done[-1] + 1))

    def restore(self, side: int, store: TaskStore) -> None:
        """Load the persisted index of ``side``."""
        x_tag = _SWEEP_TAG + MSG_TAG[side]
        for k, _ in store.scan(ColumnFamily.WINDOW_META, x_tag, prefix_upper_bound(x_tag)):
            self.buckets[side].setdefault(decode_i64(k, 2), set()).add(k[10:])
