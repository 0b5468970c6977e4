"""Frame state: a write-back cache of (key, frame) accumulators over the task store.

Frames of windows that have not fired yet ("open" frames) live in memory, so firing a
window does not read RocksDB. Closed frames are written back once per flush and then
evicted; a late event that touches one reads it back. Vector accumulators of all live
frames sit in one float64 matrix (a row per slot) so that batches merge with NumPy;
object accumulators sit in a parallel list.

Memory budget: when the open frames' estimated size exceeds ``max_bytes`` at a flush,
the oldest ones are written back and evicted too (*spilled*) until a share of the budget
is left; frames at or before :attr:`FrameStore.spilled_upto` may then be in the store
only, so an event that touches one reads it back, and firing first loads the spilled
frames of the windows it evaluates (:meth:`FrameStore.unspill`). A spilled frame changed
since the last EARLY results is remembered (key id and frame), so EARLY results read back
only the frames of the windows that changed (:meth:`FrameStore.load_early`), not every
spilled one.

:class:`FrameStore` owns every write to these arrays; the evaluator only reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

import numpy as np
import orjson

from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet, PendingMessage
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.jsonbytes import json_bytes
from window_operator.keytable import KeyTable
from window_operator.timewindows.state import FRAMES, MESSAGES, FrameCodec

__all__ = ["FrameStore"]

#: Estimated bytes of a cached frame besides its float64 row: the slot arrays and its
#: ``(key id, frame) -> slot`` entry.
_SLOT_OVERHEAD = 4 * 8 + 2 + 8 + 120
#: Estimated bytes of one object accumulator (a cheap constant: they are not measured).
_OBJECT_BYTES = 256
#: A spill leaves the open frames at this share of the budget, so it does not recur at
#: every flush.
_SPILL_TO = 0.75
#: EARLY results read back the spilled frames of the keys that changed by one lookup per
#: key and frame, unless that is more lookups than this or than the frames in memory (then
#: the range is scanned: it holds more frames than memory, since memory is over budget).
_EARLY_LOOKUPS = 4096


class FrameStore:
    """Live frame accumulators of one task, with write-back persistence."""

    def __init__(
        self,
        aggs: AggregationSet,
        store: TaskStore,
        keys: KeyTable[str],
        step: int,
        max_bytes: int | None = None,
        early: bool = False,
    ) -> None:
        self.aggs = aggs
        self.store = store
        self.keys = keys
        self.step = step
        self.codec = FrameCodec(aggs)
        self.slot_of: dict[tuple[int, int], int] = {}
        cap = 1024
        self.acc: FloatArray = np.zeros((cap, aggs.width), dtype=np.float64)
        self.kid: IntArray = np.full(cap, -1, dtype=np.int64)
        self.frame: IntArray = np.zeros(cap, dtype=np.int64)
        self.dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.early_dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        #: the store holds the slot's frame as last loaded or persisted (then ``dirty``
        #: says whether memory changed since), with ``early_stored`` as its EARLY mark
        self.stored: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.early_stored: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.objs: list[list[Any] | None] = [None] * cap
        self.free: list[int] = list(range(cap - 1, -1, -1))
        self.pending_messages: list[PendingMessage] = []
        self.max_bytes = max_bytes
        self.slot_bytes = 8 * aggs.width + _SLOT_OVERHEAD + _OBJECT_BYTES * len(aggs.objects)
        #: open frames starting at or before this may be in the store only (spilled)
        self.spilled_upto: int | None = None
        #: EARLY results are on (then spilled frames changed since the last ones are kept
        #: track of, and their keys stay in the key table until the next EARLY results)
        self.early = early
        #: spilled frames changed since the last EARLY results: key ids and frames
        self.early_spilled_kid: IntArray = np.zeros(0, dtype=np.int64)
        self.early_spilled_frame: IntArray = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.slot_of)

    # -- merging input ------------------------------------------------------------------

    def merge(self, slots: IntArray, partial: FloatArray | None) -> None:
        """Combine partial accumulators into ``slots`` (distinct) and mark them changed."""
        if partial is not None and self.aggs.width:
            self.acc[slots] = self.aggs.combine(self.acc[slots], partial)
        self.dirty[slots] = True
        self.early_dirty[slots] = True

    def accumulate_objects(
        self, slot: int, values: Sequence[Any], order: Ordering, kid: int
    ) -> None:
        """Fold one event's object values into a slot (and queue its full-state message)."""
        objs = self.objs[slot]
        assert objs is not None
        for o, (_, op) in enumerate(self.aggs.objects):
            objs[o] = op.accumulate(objs[o], values[o], order)
        full = self.aggs.full_state
        if full:
            self.pending_messages.append(
                PendingMessage(
                    kid, order.ts, order.partition, order.offset, tuple(values[o] for o in full)
                )
            )

    def accumulate_one(self, slot: int, numeric: dict[str, float], ts: int) -> None:
        """Fold one event's numeric values into a slot and mark it changed."""
        if self.aggs.width:
            self.aggs.accumulate_one(self.acc[slot], numeric, ts)
        self.dirty[slot] = True
        self.early_dirty[slot] = True

    def clear_early(self) -> None:
        """Forget which frames changed since the last EARLY results (they were emitted).

        A frame whose stored record still carries its mark is written again at the next
        :meth:`persist`, cleared: a task that reopens its store (each micro-batch may)
        would otherwise send those EARLY results again at every timer pass.
        """
        self.dirty[self.stored & self.early_stored & (self.kid >= 0)] = True
        self.early_dirty[:] = False
        self.early_spilled_kid = self.early_spilled_frame = np.zeros(0, dtype=np.int64)

    # -- slots --------------------------------------------------------------------------

    def _grow(self, need: int) -> None:
        cap = len(self.kid)
        new_cap = max(cap * 2, cap + need)
        extra = new_cap - cap
        self.acc = np.vstack([self.acc, np.zeros((extra, self.aggs.width))])
        self.kid = np.concatenate([self.kid, np.full(extra, -1, dtype=np.int64)])
        self.frame = np.concatenate([self.frame, np.zeros(extra, dtype=np.int64)])
        self.dirty = np.concatenate([self.dirty, np.zeros(extra, dtype=np.bool_)])
        self.early_dirty = np.concatenate([self.early_dirty, np.zeros(extra, dtype=np.bool_)])
        self.stored = np.concatenate([self.stored, np.zeros(extra, dtype=np.bool_)])
        self.early_stored = np.concatenate([self.early_stored, np.zeros(extra, dtype=np.bool_)])
        self.objs.extend([None] * extra)
        self.free.extend(range(new_cap - 1, cap - 1, -1))

    def allocate(self, kid: int, frame: int) -> int:
        """A fresh slot holding the empty accumulator for ``(kid, frame)``."""
        if not self.free:
            self._grow(1)
        slot = self.free.pop()
        self.slot_of[(kid, frame)] = slot
        self.kid[slot] = kid
        self.frame[slot] = frame
        self.acc[slot] = self.aggs.identity
        if self.aggs.objects:
            self.objs[slot] = self.aggs.create_objects()
        return slot

    def allocate_many(
        self, kids: IntArray, frames: IntArray, pairs: list[tuple[int, int]]
    ) -> IntArray:
        """Fresh slots for many new ``(kid, frame)`` pairs at once."""
        n = len(pairs)
        if n == 0:  # (free[-0:] would be the whole free list)
            return np.zeros(0, dtype=np.int64)
        if len(self.free) < n:
            self._grow(n - len(self.free))
        taken = self.free[-n:]
        del self.free[-n:]
        slots = np.asarray(taken, dtype=np.int64)
        self.slot_of.update(zip(pairs, taken, strict=True))
        self.kid[slots] = kids
        self.frame[slots] = frames
        self.acc[slots] = self.aggs.identity
        if self.aggs.objects:
            for s in taken:
                self.objs[s] = self.aggs.create_objects()
        return slots

    def release_many(self, slots: IntArray) -> None:
        """Free many slots at once."""
        if not len(slots):
            return
        slot_of = self.slot_of
        for pair in zip(self.kid[slots].tolist(), self.frame[slots].tolist(), strict=True):
            del slot_of[pair]
        self.kid[slots] = -1
        self.dirty[slots] = False
        self.early_dirty[slots] = False
        self.stored[slots] = False
        if self.aggs.objects:
            for s in slots.tolist():
                self.objs[s] = None
        self.free.extend(slots.tolist())

    def resolve(
        self, kids: IntArray, frames: IntArray, on_disk_possible: BoolArray
    ) -> tuple[IntArray, BoolArray]:
        """Slots for distinct ``(kid, frame)`` pairs, loading or creating them.

        Returns the slots and a mask of pairs that did not exist anywhere before (newly
        created). ``on_disk_possible`` marks closed frames that may have been evicted.
        """
        n = len(kids)
        created = np.zeros(n, dtype=np.bool_)
        if self.spilled_upto is not None:
            on_disk_possible = on_disk_possible | (frames <= self.spilled_upto)
        pairs = list(zip(kids.tolist(), frames.tolist(), strict=True))
        # one dict lookup per pair in C; the rest vectorized
        slots = np.fromiter(map(self.slot_of.get, pairs, repeat(-1)), dtype=np.int64, count=n)
        missing = slots < 0
        if not missing.any():
            return slots, created
        fresh = np.flatnonzero(missing & ~on_disk_possible)
        if len(fresh):
            slots[fresh] = self.allocate_many(
                kids[fresh], frames[fresh], [pairs[i] for i in fresh.tolist()]
            )
            created[fresh] = True
        to_load = np.flatnonzero(missing & on_disk_possible).tolist()
        if to_load:
            loaded = self.load([pairs[i] for i in to_load])
            for i, s in zip(to_load, loaded, strict=True):
                if s < 0:
                    slots[i] = self.allocate(*pairs[i])
                    created[i] = True
                else:
                    slots[i] = s
        return slots, created

    def resolve_one(self, kid: int, frame: int, on_disk_possible: bool) -> tuple[int, bool]:
        """:meth:`resolve` for one pair: ``(slot, created)``."""
        slot = self.slot_of.get((kid, frame))
        if slot is not None:
            return slot, False
        if on_disk_possible or (self.spilled_upto is not None and frame <= self.spilled_upto):
            slot = self.load([(kid, frame)])[0]
            if slot >= 0:
                return slot, False
        return self.allocate(kid, frame), True

    def get_or_load(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        """Slots of existing frames (``-1`` where the frame does not exist)."""
        out = [self.slot_of.get(p, -1) for p in pairs]
        missing = [i for i, s in enumerate(out) if s < 0]
        if missing:
            loaded = self.load([pairs[i] for i in missing])
            for i, s in zip(missing, loaded, strict=True):
                out[i] = s
        return out

    def exists(self, kid: int, frame: int) -> bool:
        """Whether the frame exists in memory or in the store."""
        if (kid, frame) in self.slot_of:
            return True
        key = FRAMES.key(frame, self.keys.encoded[kid])
        return self.store.get(FRAMES.cf, key) is not None

    # -- loading ------------------------------------------------------------------------

    def _load_record(self, kid: int, frame: int, data: bytes) -> int:
        slot = self.allocate(kid, frame)
        row, early = self.codec.decode(data, self.objs[slot])
        self.acc[slot] = row
        self.early_dirty[slot] = self.early_stored[slot] = early
        self.stored[slot] = True
        if self.aggs.full_state:
            self._load_messages(slot, kid, frame)
        return slot

    def load(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        """Read frames from the store into clean slots (``-1`` for absent frames)."""
        unique = list(dict.fromkeys(p for p in pairs if p not in self.slot_of))
        enc = self.keys.encoded
        values = self.store.multi_get(FRAMES.cf, [FRAMES.key(f, enc[k]) for k, f in unique])
        for (kid, frame), data in zip(unique, values, strict=True):
            if data is not None:
                self._load_record(kid, frame, data)
        return [self.slot_of.get(p, -1) for p in pairs]

    def _load_messages(self, slot: int, kid: int, frame: int) -> None:
        objs = self.objs[slot]
        assert objs is not None
        enc = self.keys.encoded[kid]
        for k, v in self.store.scan_range(MESSAGES.times(enc, frame, frame + self.step)):
            ts, part, off = MESSAGES.parse(k, enc)
            order = Ordering(ts, part, off)
            for j, val in zip(self.aggs.full_state, orjson.loads(v), strict=True):
                objs[j] = self.aggs.objects[j][1].accumulate(objs[j], val, order)

    def load_range(self, frame_from: int, frame_to: int | None = None) -> int:
        """Load the stored frames with ``frame_from <= frame < frame_to`` (``None``: every
        later one) that are not in memory; return how many."""
        rng = FRAMES.since(frame_from) if frame_to is None else FRAMES.times(frame_from, frame_to)
        items = list(self.store.scan_range(rng))
        if not items:
            return 0
        frames, names = FRAMES.parse_many([k for k, _ in items])
        kids = self.keys.ids_of(names)
        pairs = list(zip(kids.tolist(), frames.tolist(), strict=True))
        if self.slot_of:
            new = [i for i, p in enumerate(pairs) if p not in self.slot_of]
            pick = np.asarray(new, dtype=np.int64)
            kids, frames = kids[pick], frames[pick]
            items, pairs = [items[i] for i in new], [pairs[i] for i in new]
            if not items:
                return 0
        if not self.aggs.objects:
            rows, early = self.codec.decode_rows([v for _, v in items])
            slots = self.allocate_many(kids, frames, pairs)
            self.acc[slots] = rows
            self.early_dirty[slots] = self.early_stored[slots] = early
            self.stored[slots] = True
            return len(items)
        for (kid, frame), (_, v) in zip(pairs, items, strict=True):
            self._load_record(kid, frame, v)
        return len(items)

    def live_kids(self) -> IntArray:
        """Key ids that memory refers to (frames and messages not yet written)."""
        kids = np.concatenate([self.kid[self.kid >= 0], self.early_spilled_kid])
        if self.pending_messages:
            pending = np.fromiter((m.kid for m in self.pending_messages), dtype=np.int64)
            kids = np.concatenate([kids, pending])
        return kids

    def renumber_keys(self, remap: IntArray) -> None:
        """Apply a key table compaction (old id -> new id) to every reference in memory."""
        live = self.kid >= 0
        self.kid[live] = remap[self.kid[live]]
        self.slot_of = {(int(remap[k]), f): s for (k, f), s in self.slot_of.items()}
        self.early_spilled_kid = remap[self.early_spilled_kid]
        self.pending_messages = [
            PendingMessage(int(remap[m.kid]), m.ts, m.partition, m.offset, m.values)
            for m in self.pending_messages
        ]

    # -- writing back, evicting, expiring -----------------------------------------------

    def persist(self, batch: StoreBatch) -> int:
        """Write every dirty frame (and pending messages) into ``batch``; return the count."""
        slots = np.flatnonzero(self.dirty)
        if len(slots):
            enc = self.keys.encoded
            keys = FRAMES.keys(
                self.frame[slots].tolist(), [enc[k] for k in self.kid[slots].tolist()]
            )
            rows = self.codec.encode_rows(self.acc[slots], self.early_dirty[slots])
            heads = self.codec.split_rows(rows, len(slots))
            if self.aggs.objects:
                values = [
                    self.codec.with_objects(heads[i], self.objs[s])
                    for i, s in enumerate(slots.tolist())
                ]
            else:
                values = heads
            batch.put_many(FRAMES.cf, keys, values)
            self.dirty[slots] = False
            self.stored[slots] = True
            self.early_stored[slots] = self.early_dirty[slots]
        enc = self.keys.encoded
        for m in self.pending_messages:
            batch.put(
                MESSAGES.cf,
                MESSAGES.key(enc[m.kid], m.ts, m.partition, m.offset),
                json_bytes(list(m.values)),
            )
        self.pending_messages.clear()
        return len(slots)

    def open_bytes(self, open_from: int) -> int:
        """Estimated bytes of the cached frames with ``frame >= open_from``."""
        n = int(np.count_nonzero((self.kid >= 0) & (self.frame >= open_from)))
        return n * self.slot_bytes

    def select_spill(self, open_from: int) -> IntArray:
        """The oldest open frames (``frame >= open_from``) beyond the budget.

        Those whose stored record is not current (changed, never written, or with another
        EARLY mark) are marked dirty, so the next :meth:`persist` writes them; a frame
        read back unchanged is not written again. All must then be released
        (:meth:`release_many`); frames at or before :attr:`spilled_upto` are read back
        from the store when needed.
        """
        if self.spilled_upto is not None and self.spilled_upto < open_from:
            self.spilled_upto = None  # every spilled frame closed: the closed path reads them
        if self.max_bytes is None or self.open_bytes(open_from) <= self.max_bytes:
            return np.zeros(0, dtype=np.int64)
        live = np.flatnonzero((self.kid >= 0) & (self.frame >= open_from))
        keep = int(self.max_bytes * _SPILL_TO) // self.slot_bytes
        victims = live[np.argsort(self.frame[live], kind="stable")[: max(len(live) - keep, 0)]]
        if len(victims):
            top = int(self.frame[victims].max())
            if self.spilled_upto is None or top > self.spilled_upto:
                self.spilled_upto = top
            current = self.stored[victims] & (
                self.early_dirty[victims] == self.early_stored[victims]
            )
            self.dirty[victims[~current]] = True
            marked = victims[self.early_dirty[victims]] if self.early else victims[:0]
            self.early_spilled_kid = np.concatenate([self.early_spilled_kid, self.kid[marked]])
            self.early_spilled_frame = np.concatenate(
                [self.early_spilled_frame, self.frame[marked]]
            )
        return victims

    def load_early(self, open_from: int, size: int) -> int:
        """Read back the spilled frames that EARLY results of the open windows (frames at
        or after ``open_from``, ``size`` long) need; return how many were read.

        Those are the frames of the keys with a frame changed since the last EARLY
        results (spilled changed frames included), from the first window holding such a
        frame to the last frame of the last one: exactly the frames the evaluator reads
        for them, found by one lookup per key and frame, or by reading the whole range
        when that would be many lookups (see :data:`_EARLY_LOOKUPS`).
        """
        if self.spilled_upto is None or self.spilled_upto < open_from:
            return 0
        held = (self.kid >= 0) & self.early_dirty
        kids = np.concatenate([self.kid[held], self.early_spilled_kid])
        frames = np.concatenate([self.frame[held], self.early_spilled_frame])
        keep = frames >= open_from
        kids, frames = kids[keep], frames[keep]
        if not len(kids):
            return 0
        step = self.step
        lo = max(open_from, int(frames.min()) - size + step)
        hi = min(int(frames.max()) + size - step, self.spilled_upto)
        if hi < lo:
            return 0
        changed = np.unique(kids)
        span = np.arange(lo - lo % step, hi + 1, step, dtype=np.int64)
        span = span[span >= lo]
        if len(changed) * len(span) > max(_EARLY_LOOKUPS, len(self.slot_of)):
            return self.load_range(lo, hi + 1)
        owners = np.repeat(changed, len(span)).tolist()
        wanted = zip(owners, np.tile(span, len(changed)).tolist(), strict=True)
        pairs = [p for p in wanted if p not in self.slot_of]
        return sum(s >= 0 for s in self.load(pairs)) if pairs else 0

    def unspill(self, frame_from: int, frame_to: int) -> int:
        """Load the spilled frames with ``frame_from <= frame <= frame_to`` (before windows
        over them are evaluated); return how many."""
        if self.spilled_upto is None or frame_from > self.spilled_upto:
            return 0
        return self.load_range(frame_from, min(frame_to, self.spilled_upto) + 1)

    def evict_closed(self, frame_limit: int) -> int:
        """Drop clean frames with ``frame < frame_limit`` from memory (they are in the store)."""
        cand = np.flatnonzero((self.kid >= 0) & (self.frame < frame_limit) & ~self.dirty)
        self.release_many(cand)
        return len(cand)

    def expire(self, batch: StoreBatch, cutoff_frame: int, previous_cutoff: int | None) -> None:
        """Delete frames with ``frame <= cutoff_frame`` and their messages (disk and memory)."""
        if self.aggs.full_state:
            self._expire_messages(batch, cutoff_frame, previous_cutoff)
        batch.delete_keys(FRAMES.upto(cutoff_frame))
        self.release_many(np.flatnonzero((self.kid >= 0) & (self.frame <= cutoff_frame)))

    def _expire_messages(
        self, batch: StoreBatch, cutoff_frame: int, previous_cutoff: int | None
    ) -> None:
        # Messages are key-first: find the keys of the expiring frames (dead records
        # only, so their blocks stay out of the block cache) and range-delete each key's
        # expired prefix.
        lo = -(2**63) if previous_cutoff is None else previous_cutoff + 1
        expiring: set[int] = set()
        for k, _ in self.store.scan_range(FRAMES.times(lo, cutoff_frame + 1), fill_cache=False):
            expiring.add(self.keys.id_of(FRAMES.parse(k).key))
        mem = np.flatnonzero((self.kid >= 0) & (self.frame <= cutoff_frame))
        expiring.update(self.kid[mem].tolist())
        enc = self.keys.encoded
        end = cutoff_frame + self.step
        for kid in sorted(expiring):
            batch.delete_keys(MESSAGES.times(enc[kid], -(2**63), end))
        self.pending_messages = [m for m in self.pending_messages if m.ts >= end]
