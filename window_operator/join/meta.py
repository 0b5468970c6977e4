"""The Window Meta Store's time metadata: per input and event-time frame, the count,
time and position bounds of its messages; and the per-prefix expiry index of key-first
layouts (which join keys have messages in which expiry bucket).
"""

from __future__ import annotations

import numpy as np

from stores.keys import MIN_I64
from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import IntArray
from window_operator.join.state import FRAMES, SWEEP, FrameRecord, MessageCodec

__all__ = ["SweepIndex", "WindowFrames"]


class WindowFrames:
    """Window metadata per ``(side, frame)``: ``[count, min_ts, max_ts, min_pos, max_pos]``.

    Frames are tumbling, ``frame_ms`` long; a message belongs to the one that includes
    it. Stored in :data:`~window_operator.join.state.FRAMES`.
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
                ks = FRAMES[side]
                batch.put(ks.cf, ks.key(f), FrameRecord.encode(m))
        self.dirty.clear()

    def expire(self, side: int, cut: int, batch: StoreBatch) -> None:
        """Drop the frames of ``side`` that end at or before ``cut``."""
        frame = self.frame_ms
        batch.delete_keys(FRAMES[side].before(cut - frame + 1))
        for kw in [kw for kw in self.meta if kw[0] == side and kw[1] + frame <= cut]:
            del self.meta[kw]
            self.dirty.discard(kw)

    def held(self, side: int, cut: int) -> int:
        """The messages of ``side`` in its frames, ``cut`` being where they expired: a
        frame the cut falls in counts whole unless every message of it is below the cut
        (so the figure is at most one frame's messages over)."""
        return sum(m[0] for (s, _), m in self.meta.items() if s == side and m[2] >= cut)

    def restore(self, side: int, store: TaskStore) -> None:
        """Load the persisted frames of ``side``."""
        ks = FRAMES[side]
        for k, v in store.scan_range(ks.all()):
            (frame,) = ks.parse(k)
            self.meta[(side, frame)] = FrameRecord.decode(v)


class SweepIndex:
    """Which join keys have messages in which ``sweep_ms`` bucket, per side.

    Key-first layouts expire by one range delete per join key and bucket. Stored in
    :data:`~window_operator.join.state.SWEEP`.
    """

    def __init__(self, sweep_ms: int) -> None:
        self.sweep_ms = sweep_ms
        self.buckets: tuple[dict[int, set[EncodedKey]], dict[int, set[EncodedKey]]] = ({}, {})
        self.new: list[bytes] = []

    def note(self, side: int, kids: IntArray, ts: IntArray, encoded: list[EncodedKey]) -> None:
        """Record which join keys have messages in which expiry bucket."""
        buckets = ts // self.sweep_ms
        index = self.buckets[side]
        ks = SWEEP[side]
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
                self.new.extend(ks.keys(bucket, sorted(new)))

    def write(self, batch: StoreBatch) -> None:
        """Persist the new index entries."""
        batch.put_many(SWEEP[0].cf, self.new, [b""] * len(self.new))
        self.new = []

    def expire(self, side: int, cut: int, codec: MessageCodec, batch: StoreBatch) -> None:
        """Key-first layout: one range delete per join key of each expired bucket."""
        g = self.sweep_ms
        index = self.buckets[side]
        done = sorted(b for b in index if (b + 1) * g <= cut)
        if not done:
            return
        prefixes: set[EncodedKey] = set()
        for b in done:
            prefixes |= index.pop(b)
        for keys in codec.keyspace.key_times_many(sorted(prefixes), MIN_I64, cut):
            batch.delete_keys(keys)
        batch.delete_keys(SWEEP[side].before(done[-1] + 1))

    def restore(self, side: int, store: TaskStore) -> None:
        """Load the persisted index of ``side``."""
        ks = SWEEP[side]
        for k, _ in store.scan_range(ks.all()):
            entry = ks.parse(k)
            self.buckets[side].setdefault(entry.time, set()).add(entry.key)
