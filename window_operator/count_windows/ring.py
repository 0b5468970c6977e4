"""The open frames of every key: a ring of ``k`` slots per key, in memory and in the store.

At message count ``c`` a key's open windows start at frames ``> c // step - k``, so the
frames ``c // step - k + 1 .. c // step`` are all that is needed; frame ``f`` lives in
slot ``f % k`` and the slot of ``c // step`` always holds that frame (empty when ``c``
is a multiple of step). Vector accumulators are one ``(keys, k, width)`` array; object
accumulators a flat list indexed ``kid * k + slot``.

:class:`Ring` owns every write to these arrays; the evaluator only reads them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stores.errors import StateCorruptError
from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet, PendingMessage
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.count_windows.state import MESSAGES, RING, FrameCodec, MessageCodec
from window_operator.keytable import KeyTable

__all__ = ["Ring"]

#: Frames a ring has room for before its first key (keys then double its room).
_FIRST_FRAMES = 4096


class Ring:
    """Every key's open frames and message count (see module doc)."""

    def __init__(self, aggs: AggregationSet, k: int, step: int) -> None:
        self.aggs = aggs
        self.k = k
        self.step = step
        self.codec = FrameCodec(aggs)
        # room for 64 keys, fewer for long rings (a key costs k frames: a ring of a
        # million frames started with room for 64 keys took gigabytes before any input)
        cap = max(1, min(64, _FIRST_FRAMES // k))
        self.count: IntArray = np.zeros(cap, dtype=np.int64)
        self.acc: FloatArray = np.empty((cap, k, aggs.width), dtype=np.float64)
        self.acc[:] = aggs.identity
        self.seq: IntArray = np.zeros((cap, k), dtype=np.int64)
        #: changed since the last EARLY results
        self.early: BoolArray = np.zeros((cap, k), dtype=np.bool_)
        #: changed since the end-of-input emission
        self.unfinal: BoolArray = np.zeros((cap, k), dtype=np.bool_)
        #: changed since the last flush
        self.dirty: BoolArray = np.zeros((cap, k), dtype=np.bool_)
        self.objs: list[list[Any]] = (
            [aggs.create_objects() for _ in range(cap * k)] if aggs.objects else []
        )
        self.pending: list[PendingMessage] = []

    # -- reading ------------------------------------------------------------------------

    def frames_held(self, kids: IntArray, slots: IntArray) -> IntArray:
        """The frame each ``(kid, slot)`` holds: the newest one ``<= count // step`` there."""
        top = self.count[kids] // self.step
        result: IntArray = top - np.mod(top - slots, self.k)
        return result

    def objects_at(self, kids: IntArray, slots: IntArray) -> list[list[Any]]:
        """The object accumulators of ``(kid, slot)`` pairs (the live lists, not copies)."""
        objs = self.objs
        return [objs[i] for i in (kids * self.k + slots).tolist()]

    # -- writing ------------------------------------------------------------------------

    def ensure(self, n_keys: int) -> None:
        """Grow every array to hold at least ``n_keys`` keys."""
        cap = len(self.count)
        if n_keys <= cap:
            return
        extra = max(2 * cap, n_keys) - cap
        k, aggs = self.k, self.aggs
        self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
        grown = np.empty((extra, k, aggs.width), dtype=np.float64)
        grown[:] = aggs.identity
        self.acc = np.concatenate([self.acc, grown])
        self.seq = np.concatenate([self.seq, np.zeros((extra, k), dtype=np.int64)])
        more = np.zeros((extra, k), dtype=np.bool_)
        self.early = np.concatenate([self.early, more])
        self.unfinal = np.concatenate([self.unfinal, more])
        self.dirty = np.concatenate([self.dirty, more])
        if aggs.objects:
            self.objs.extend(aggs.create_objects() for _ in range(extra * k))

    def store_frames(
        self,
        kids: IntArray,
        slots: IntArray,
        rows: FloatArray,
        born: BoolArray,
        objs: list[list[Any]] | None,
    ) -> None:
        """Write merged frames back into their slots (``born``: frames new in this batch)."""
        self.acc[kids, slots] = rows
        self.seq[kids[born], slots[born]] = 0
        self.early[kids, slots] = True
        self.unfinal[kids, slots] = True
        self.dirty[kids, slots] = True
        if objs is not None:
            for flat, o in zip((kids * self.k + slots).tolist(), objs, strict=True):
                self.objs[flat] = o

    def set_counts(self, kids: IntArray, counts: IntArray) -> None:
        """The keys' message counts after a batch."""
        self.count[kids] = counts

    def reset(self, kids: IntArray, frames: IntArray) -> None:
        """Start empty frames (their slot's previous frame is no longer needed)."""
        if not len(kids):
            return
        slots = frames % self.k
        self.acc[kids, slots] = self.aggs.identity
        self.seq[kids, slots] = 0
        self.early[kids, slots] = False
        self.unfinal[kids, slots] = False
        self.dirty[kids, slots] = True
        if self.aggs.objects:
            for i in (kids * self.k + slots).tolist():
                self.objs[i] = self.aggs.create_objects()

    def queue_message(self, message: PendingMessage) -> None:
        """Keep a full-state message for the next flush (its ``ts`` is the message index)."""
        self.pending.append(message)

    def next_seqs(self, kids: IntArray, slots: IntArray) -> IntArray:
        """The ``update_seq`` of windows starting at these slots; counts them as emitted."""
        seqs = self.seq[kids, slots].copy()
        self.seq[kids, slots] += 1
        self.dirty[kids, slots] = True
        return seqs

    def early_emitted(self) -> None:
        """The changed frames were emitted EARLY: clear (and persist) their marks."""
        self.dirty |= self.early
        self.early[:] = False

    def input_ended(self) -> None:
        """Every window was emitted at the end of input: clear (and persist) both marks."""
        # persisted, so that a restored operator does not repeat the emission
        self.dirty |= self.unfinal | self.early
        self.unfinal[:] = False
        self.early[:] = False

    # -- persistence --------------------------------------------------------------------

    def persist(self, batch: StoreBatch, keys: KeyTable[str]) -> None:
        """Write dirty slots and pending messages into ``batch``.

        Every record carries the key's message count: whenever the count changes, the
        slot of frame ``count // step`` changes too, so the largest count among a key's
        records is its count, without a record of its own to write.
        """
        enc = keys.encoded
        kids, slots = np.nonzero(self.dirty)
        if len(kids):
            kids = kids.astype(np.int64)
            slots = slots.astype(np.int64)
            values = self.codec.encode_heads(
                self.frames_held(kids, slots),
                self.count[kids],
                self.seq[kids, slots],
                self.early[kids, slots],
                self.unfinal[kids, slots],
                self.acc[kids, slots],
            )
            if self.aggs.objects:
                values = [
                    self.codec.with_objects(v, o)
                    for v, o in zip(values, self.objects_at(kids, slots), strict=True)
                ]
            store_keys = RING.keys([enc[kid] for kid in kids.tolist()], slots.tolist())
            batch.put_many(RING.cf, store_keys, values)
            self.dirty[kids, slots] = False
        ring_messages = self.k * self.step
        for m in self.pending:
            batch.put(
                MESSAGES.cf,
                MESSAGES.key(enc[m.kid], m.ts % ring_messages),
                MessageCodec.encode(m.ts, m.partition, m.offset, m.values),
            )
        self.pending.clear()

    def restore(self, store: TaskStore, keys: KeyTable[str]) -> None:
        """Load counts, ring slots and full-state messages written by :meth:`persist`."""
        records: list[tuple[int, int, bytes]] = []
        for key_bytes, value in store.scan_range(RING.all()):
            entry = RING.parse(key_bytes)
            kid = keys.id_of(entry.key)
            self.ensure(kid + 1)
            self.count[kid] = max(int(self.count[kid]), self.codec.count_of(value))
            records.append((kid, entry.slot, value))
        for kid, slot, value in records:
            self._load_slot(kid, slot, value)
        if self.aggs.full_state:
            self._load_messages(store, keys)

    def _load_slot(self, kid: int, slot: int, value: bytes) -> None:
        objs = None
        if self.aggs.objects:
            objs = self.objs[kid * self.k + slot] = self.aggs.create_objects()
        rec = self.codec.decode(value, objs)
        held = int(self.frames_held(np.array([kid]), np.array([slot]))[0])
        if rec.frame != held:
            raise StateCorruptError(
                f"ring slot {slot} of key id {kid} holds frame {rec.frame}, expected {held}: "
                "the store is inconsistent; rebuild it from the changelog or a fresh state dir"
            )
        self.acc[kid, slot] = rec.acc
        self.seq[kid, slot] = rec.seq
        self.early[kid, slot] = rec.early
        self.unfinal[kid, slot] = rec.unfinal

    def _load_messages(self, store: TaskStore, keys: KeyTable[str]) -> None:
        k, step = self.k, self.step
        full = self.aggs.full_state
        ops = self.aggs.objects
        for key_bytes, value in store.scan_range(MESSAGES.all()):
            kid = keys.id_of(MESSAGES.parse(key_bytes).key)
            msg = MessageCodec.decode(value)
            count = int(self.count[kid])
            first_open = max(count // step - k + 1, 0) * step
            if not first_open <= msg.n < count:
                continue  # a message of a dropped frame whose ring position was not reused
            objs = self.objs[kid * k + (msg.n // step) % k]
            order = Ordering(msg.n, msg.partition, msg.offset)
            for j, v in zip(full, msg.values, strict=True):
                objs[j] = ops[j][1].accumulate(objs[j], v, order)
