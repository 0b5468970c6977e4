"""Frame state: a write-back cache of (key, frame) accumulators over the task store.

Frames of windows that have not fired yet ("open" frames) always live in memory, so
firing a window never reads RocksDB. Closed frames are written back once per flush
and then evicted; a late event that touches one reads it back. Vector accumulators of
all live frames sit in one float64 matrix (a row per slot) so that batches merge with
NumPy; object accumulators sit in a parallel list.

Store layout (Window Meta Store, time-first so retention is one range delete)::

    b"F" + i64(frame_start) + str(key)  ->  frame record
    b"W" + i64(window_start) + str(key) ->  window bookkeeping (see aggregator)

Message Store (key-first, for full-state operations)::

    str(key) + i64(ts) + i64(partition) + i64(offset) -> JSON list of values
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from stores.keys import decode_i64, decode_str, encode_i64, encode_str, prefix_upper_bound
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet

__all__ = ["FRAME_TAG", "WINDOW_TAG", "FrameCache", "KeyTable", "PendingMessage"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

FRAME_TAG = b"F"
WINDOW_TAG = b"W"
_RECORD_VERSION = 1
#: High bit of a record's version byte: the frame changed since the last EARLY results,
#: so that a restarted task still emits them.
_EARLY_DIRTY = 0x80
_LEN = struct.Struct(">I")
_MIN_I64_BYTES = encode_i64(-(2**63))


class KeyTable:
    """Interns grouping keys as small integers (and caches their store encoding)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self.encoded: list[bytes] = []

    def id_of(self, key: str) -> int:
        """The id of ``key``, assigning the next one if new."""
        kid = self.ids.get(key)
        if kid is None:
            kid = len(self.names)
            self.ids[key] = kid
            self.names.append(key)
            self.encoded.append(encode_str(key))
        return kid

    def ids_of(self, keys: Sequence[str]) -> IntArray:
        """Vectorized :meth:`id_of`: new keys get ids in first-seen order."""
        ids = self.ids
        if len(ids) < len(keys) or any(k not in ids for k in dict.fromkeys(keys)):
            for k in dict.fromkeys(keys):
                if k not in ids:
                    self.id_of(k)
        return np.fromiter(map(ids.__getitem__, keys), dtype=np.int64, count=len(keys))


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """A message of a full-state aggregation waiting to be written to the Message Store."""

    kid: int
    ts: int
    partition: int
    offset: int
    values: tuple[Any, ...]


class FrameCache:
    """Live frame accumulators of one task, with write-back persistence."""

    def __init__(self, aggs: AggregationSet, store: TaskStore, keys: KeyTable, step: int) -> None:
        self.aggs = aggs
        self.store = store
        self.keys = keys
        self.step = step
        self.slot_of: dict[tuple[int, int], int] = {}
        cap = 1024
        self.acc: FloatArray = np.zeros((cap, aggs.width), dtype=np.float64)
        self.kid: IntArray = np.full(cap, -1, dtype=np.int64)
        self.frame: IntArray = np.zeros(cap, dtype=np.int64)
        self.dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.early_dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.objs: list[list[Any] | None] = [None] * cap
        self.free: list[int] = list(range(cap - 1, -1, -1))
        self.pending_messages: list[PendingMessage] = []

    # -- slots --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.slot_of)

    def _grow(self, need: int) -> None:
        cap = len(self.kid)
        new_cap = max(cap * 2, cap + need)
        extra = new_cap - cap
        self.acc = np.vstack([self.acc, np.zeros((extra, self.aggs.width))])
        self.kid = np.concatenate([self.kid, np.full(extra, -1, dtype=np.int64)])
        self.frame = np.concatenate([self.frame, np.zeros(extra, dtype=np.int64)])
        self.dirty = np.concatenate([self.dirty, np.zeros(extra, dtype=np.bool_)])
        self.early_dirty = np.concatenate([self.early_dirty, np.zeros(extra, dtype=np.bool_)])
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
        if self.aggs.objects:
            for s in slots.tolist():
                self.objs[s] = None
        self.free.extend(slots.tolist())

    def resolve(
        self, kids: IntArray, frames: IntArray, on_disk_possible: BoolArray
    ) -> tuple[IntArray, BoolArray]:
        """Slots for distinct ``(kid, frame)`` pairs, loading or creating them.

        Returns the slots and a mask of pairs that did not exist anywhere before
        (newly created). ``on_disk_possible`` marks closed frames that may have been
        evicted to the store.
        """
        n = len(kids)
        slots = np.empty(n, dtype=np.int64)
        created = np.zeros(n, dtype=np.bool_)
        pairs = list(zip(kids.tolist(), frames.tolist(), strict=True))
        found = list(map(self.slot_of.get, pairs))
        disk = on_disk_possible.tolist()
        to_load: list[int] = []
        fresh: list[int] = []
        for i, s in enumerate(found):
            if s is not None:
                slots[i] = s
            elif disk[i]:
                to_load.append(i)
            else:
                fresh.append(i)
        if fresh:
            idx = np.asarray(fresh, dtype=np.int64)
            slots[idx] = self.allocate_many(kids[idx], frames[idx], [pairs[i] for i in fresh])
            created[idx] = True
        if to_load:
            loaded = self.load([pairs[i] for i in to_load])
            for i, s in zip(to_load, loaded, strict=True):
                if s < 0:
                    slots[i] = self.allocate(*pairs[i])
                    created[i] = True
                else:
                    slots[i] = s
        return slots, created

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
        return self.store.get(ColumnFamily.WINDOW_META, self.frame_key(kid, frame)) is not None

    # -- store records ------------------------------------------------------------------

    def frame_key(self, kid: int, frame: int) -> bytes:
        """Store key of a frame record."""
        return FRAME_TAG + encode_i64(frame) + self.keys.encoded[kid]

    def _encode_objects(self, slot: int, head: bytes) -> bytes:
        parts = [head]
        objs = self.objs[slot]
        if objs is not None:
            for j, (_, op) in enumerate(self.aggs.objects):
                if not op.full_state:
                    payload = op.dumps(objs[j])
                    parts.append(_LEN.pack(len(payload)))
                    parts.append(payload)
        return b"".join(parts)

    def _decode_into(self, slot: int, data: bytes) -> None:
        if data[0] & 0x7F != _RECORD_VERSION:
            raise ValueError(f"unknown frame record version {data[0]}")
        self.early_dirty[slot] = bool(data[0] & _EARLY_DIRTY)
        width = self.aggs.width * 8
        self.acc[slot] = np.frombuffer(data, dtype=np.float64, count=self.aggs.width, offset=1)
        pos = 1 + width
        objs = self.objs[slot]
        if objs is not None:
            for j, (_, op) in enumerate(self.aggs.objects):
                if op.full_state:
                    continue
                (length,) = _LEN.unpack_from(data, pos)
                pos += 4
                objs[j] = op.loads(data[pos : pos + length])
                pos += length

    def load(self, pairs: Sequence[tuple[int, int]]) -> list[int]:
        """Read frames from the store into clean slots (``-1`` for absent frames)."""
        unique = list(dict.fromkeys(p for p in pairs if p not in self.slot_of))
        values = self.store.multi_get(
            ColumnFamily.WINDOW_META, [self.frame_key(k, f) for k, f in unique]
        )
        for (kid, frame), data in zip(unique, values, strict=True):
            if data is None:
                continue
            slot = self.allocate(kid, frame)
            self._decode_into(slot, data)
            if self.aggs.full_state:
                self._load_messages(slot, kid, frame)
        return [self.slot_of.get(p, -1) for p in pairs]

    def message_key(self, kid: int, ts: int, partition: int, offset: int) -> bytes:
        """Message Store key of a full-state message."""
        return self.keys.encoded[kid] + encode_i64(ts) + encode_i64(partition) + encode_i64(offset)

    def _load_messages(self, slot: int, kid: int, frame: int) -> None:
        objs = self.objs[slot]
        assert objs is not None
        prefix = self.keys.encoded[kid]
        lo = prefix + encode_i64(frame)
        hi = prefix + encode_i64(frame + self.step)
        plen = len(prefix)
        for k, v in self.store.scan(ColumnFamily.MESSAGES, lo, hi):
            ts = decode_i64(k, plen)
            part = decode_i64(k, plen + 8)
            off = decode_i64(k, plen + 16)
            vals = orjson.loads(v)
            order = Ordering(ts, part, off)
            for j, val in zip(self.aggs.full_state, vals, strict=True):
                op = self.aggs.objects[j][1]
                objs[j] = op.accumulate(objs[j], val, order)

    def load_range(self, frame_from: int) -> int:
        """Load every stored frame with ``frame >= frame_from`` (open frames on restart)."""
        lo = FRAME_TAG + encode_i64(frame_from)
        hi = prefix_upper_bound(FRAME_TAG)
        if not self.aggs.objects and not self.slot_of:
            return self._load_rows(lo, hi)
        n = 0
        for k, v in self.store.scan(ColumnFamily.WINDOW_META, lo, hi):
            frame = decode_i64(k, 1)
            key, _ = decode_str(k, 9)
            kid = self.keys.id_of(key)
            if (kid, frame) in self.slot_of:
                continue
            slot = self.allocate(kid, frame)
            self._decode_into(slot, v)
            if self.aggs.full_state:
                self._load_messages(slot, kid, frame)
            n += 1
        return n

    def _load_rows(self, lo: bytes, hi: bytes | None) -> int:
        """:meth:`load_range` for vector-only jobs into an empty cache, all rows at once."""
        items = list(self.store.scan(ColumnFamily.WINDOW_META, lo, hi))
        if not items:
            return 0
        n = len(items)
        frames = np.fromiter((decode_i64(k, 1) for k, _ in items), dtype=np.int64, count=n)
        names = [
            k[9:-2].decode() if b"\x00" not in k[9:-2] else decode_str(k, 9)[0] for k, _ in items
        ]
        kids = self.keys.ids_of(names)
        width = 1 + self.aggs.width * 8
        raw = np.frombuffer(b"".join(v for _, v in items), dtype=np.uint8)
        heads = raw[::width]
        if len(raw) != n * width or ((heads & 0x7F) != _RECORD_VERSION).any():
            raise ValueError("frame records of an unexpected layout in the store")
        slots = self.allocate_many(
            kids, frames, list(zip(kids.tolist(), frames.tolist(), strict=True))
        )
        rows = raw.reshape(n, width)[:, 1:].copy().view(np.float64)
        self.acc[slots] = rows
        self.early_dirty[slots] = (heads & _EARLY_DIRTY) != 0
        return n

    def persist(self, batch: StoreBatch) -> int:
        """Write every dirty frame (and pending messages) into ``batch``; return the count."""
        slots = np.flatnonzero(self.dirty)
        if len(slots):
            n = len(slots)
            frames = self.frame[slots]
            kids = self.kid[slots].tolist()
            enc = self.keys.encoded
            prefixes = {f: FRAME_TAG + encode_i64(f) for f in np.unique(frames).tolist()}
            keys = [prefixes[f] + enc[k] for f, k in zip(frames.tolist(), kids, strict=True)]
            # version byte + float64 row, built for all records at once
            width = 1 + self.aggs.width * 8
            buf = np.empty((n, width), dtype=np.uint8)
            buf[:, 0] = _RECORD_VERSION | (self.early_dirty[slots].astype(np.uint8) << 7)
            buf[:, 1:] = np.ascontiguousarray(self.acc[slots]).view(np.uint8).reshape(n, -1)
            data = buf.tobytes()
            if self.aggs.objects:
                values = [
                    self._encode_objects(s, data[i * width : (i + 1) * width])
                    for i, s in enumerate(slots.tolist())
                ]
            else:
                values = [data[i : i + width] for i in range(0, n * width, width)]
            batch.put_many(ColumnFamily.WINDOW_META, keys, values)
            self.dirty[slots] = False
        for m in self.pending_messages:
            batch.put(
                ColumnFamily.MESSAGES,
                self.message_key(m.kid, m.ts, m.partition, m.offset),
                orjson.dumps(list(m.values)),
            )
        self.pending_messages.clear()
        return len(slots)

    def evict_closed(self, frame_limit: int) -> int:
        """Drop clean frames with ``frame < frame_limit`` from memory (they are in the store)."""
        cand = np.flatnonzero((self.kid >= 0) & (self.frame < frame_limit) & ~self.dirty)
        self.release_many(cand)
        return len(cand)

    def expire(self, batch: StoreBatch, cutoff_frame: int, previous_cutoff: int | None) -> None:
        """Delete frames with ``frame <= cutoff_frame`` and their messages (disk and memory)."""
        end = FRAME_TAG + encode_i64(cutoff_frame + 1)
        if self.aggs.full_state:
            # Messages are key-first: find the keys of the expiring frames (dead records
            # only) and range-delete each key's expired prefix.
            lo = FRAME_TAG + (
                _MIN_I64_BYTES if previous_cutoff is None else encode_i64(previous_cutoff + 1)
            )
            expiring: set[int] = set()
            for k, _ in self.store.scan(ColumnFamily.WINDOW_META, lo, end):
                expiring.add(self.keys.id_of(decode_str(k, 9)[0]))
            mem = np.flatnonzero((self.kid >= 0) & (self.frame <= cutoff_frame))
            expiring.update(self.kid[mem].tolist())
            msg_end = encode_i64(cutoff_frame + self.step)
            for kid in sorted(expiring):
                prefix = self.keys.encoded[kid]
                batch.delete_range(ColumnFamily.MESSAGES, prefix + _MIN_I64_BYTES, prefix + msg_end)
            self.pending_messages = [
                m for m in self.pending_messages if m.ts >= cutoff_frame + self.step
            ]
        batch.delete_range(ColumnFamily.WINDOW_META, FRAME_TAG + _MIN_I64_BYTES, end)
        self.release_many(np.flatnonzero((self.kid >= 0) & (self.frame <= cutoff_frame)))
