"""The in-memory write-back cache of sessions: parallel arrays indexed by slot."""

from __future__ import annotations

from typing import Any

import numpy as np

from window_operator.arrays import BoolArray, FloatArray, IntArray

__all__ = ["Slots"]


class Slots:
    """Cached sessions: parallel arrays indexed by slot (``kid < 0`` = free)."""

    _INT = ("kid", "start", "last", "seq", "em_start", "em_end", "stored_start", "idx_bucket")
    _BOOL = ("emitted", "closed", "pending", "early", "dirty", "stored", "p_stored")

    def __init__(self, width: int) -> None:
        cap = 1024
        self.width = width
        self.kid: IntArray = np.full(cap, -1, dtype=np.int64)
        self.start: IntArray = np.zeros(cap, dtype=np.int64)
        self.last: IntArray = np.zeros(cap, dtype=np.int64)
        self.seq: IntArray = np.zeros(cap, dtype=np.int64)
        self.em_start: IntArray = np.zeros(cap, dtype=np.int64)
        self.em_end: IntArray = np.zeros(cap, dtype=np.int64)
        self.stored_start: IntArray = np.zeros(cap, dtype=np.int64)
        self.idx_bucket: IntArray = np.zeros(cap, dtype=np.int64)
        self.emitted: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.closed: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.pending: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.early: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.stored: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.p_stored: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.acc: FloatArray = np.zeros((cap, width), dtype=np.float64)
        self.objs: list[list[Any] | None] = [None] * cap
        #: Emitted bounds beyond ``em_start/em_end`` (sessions merged after emission).
        self.extra: dict[int, list[tuple[int, int]]] = {}
        #: Free slots as a stack, taken from the top (the end). An array, not a list: a list
        #: would keep a Python int per free slot alive across batches, scattered over the
        #: interpreter's memory arenas among short-lived objects, so that arenas holding
        #: only a few of them could never be given back.
        self.free: IntArray = np.arange(cap - 1, -1, -1, dtype=np.int64)
        #: the stack's height: ``free[:n_free]`` are the free slots
        self.n_free = cap

    def __len__(self) -> int:
        return len(self.kid) - self.n_free

    def _push_free(self, slots: IntArray) -> None:
        n = self.n_free + len(slots)
        self.free[self.n_free : n] = slots
        self.n_free = n

    def _grow(self, need: int) -> None:
        cap = len(self.kid)
        new_cap = max(cap * 2, cap + need)
        extra = new_cap - cap
        for name in self._INT:
            fill = -1 if name == "kid" else 0
            old: IntArray = getattr(self, name)
            setattr(self, name, np.concatenate([old, np.full(extra, fill, dtype=np.int64)]))
        for name in self._BOOL:
            oldb: BoolArray = getattr(self, name)
            setattr(self, name, np.concatenate([oldb, np.zeros(extra, dtype=np.bool_)]))
        self.acc = np.vstack([self.acc, np.zeros((extra, self.width))])
        self.objs.extend([None] * extra)
        # the stack never holds more than every slot
        self.free = np.concatenate([self.free, np.zeros(extra, dtype=np.int64)])
        self._push_free(np.arange(new_cap - 1, cap - 1, -1, dtype=np.int64))

    def allocate(self, n: int) -> IntArray:
        """``n`` free slots (their fields must be set by the caller)."""
        if self.n_free < n:
            self._grow(n - self.n_free)
        self.n_free -= n
        slots = self.free[self.n_free : self.n_free + n].copy()
        for name in self._BOOL:
            getattr(self, name)[slots] = False
        return slots

    def release(self, slots: IntArray) -> None:
        """Free slots."""
        if not len(slots):
            return
        self.kid[slots] = -1
        for name in self._BOOL:
            getattr(self, name)[slots] = False
        for s in slots.tolist():
            self.objs[s] = None
            self.extra.pop(s, None)
        self._push_free(slots)

    def live(self) -> IntArray:
        """Slots holding a session."""
        return np.flatnonzero(self.kid >= 0)

    def of_kids(self, mask: BoolArray) -> IntArray:
        """Live slots whose kid is marked in ``mask`` (one entry per kid)."""
        kid = self.kid
        live = kid >= 0
        out = np.zeros(len(kid), dtype=np.bool_)
        out[live] = mask[kid[live]]
        return np.flatnonzero(out)

    def emitted_bounds(self, slot: int) -> list[tuple[int, int]]:
        """Every identity emitted for this session and not yet retracted."""
        out = [(int(self.em_start[slot]), int(self.em_end[slot]))] if self.emitted[slot] else []
        return out + self.extra.get(slot, [])
