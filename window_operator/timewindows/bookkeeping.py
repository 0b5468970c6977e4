"""Window bookkeeping: update sequence numbers and pending LATE updates.

Only windows with a history need a record: those emitted EARLY (their next ON_TIME is
not ``update_seq`` 0) and those changed by late events (a LATE update is pending or was
sent). Every other window's first result has ``update_seq`` 0 and needs nothing stored.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import BoolArray, IntArray
from window_operator.keytable import KeyTable
from window_operator.results import Kind
from window_operator.timewindows.state import WINDOWS, WindowRecord

__all__ = ["WindowBook"]

WindowId = tuple[int, int]
"""``(key id, window start)``."""


class WindowBook:
    """Bookkeeping of windows with a history, cached and written back per flush.

    Parallel arrays indexed by slot (``kid < 0``: free), as in the frame store, so that
    emitting, writing back and forgetting many windows costs NumPy operations, not a
    Python step per window.
    """

    def __init__(self, store: TaskStore, keys: KeyTable[str]) -> None:
        self.store = store
        self.keys = keys
        self.slot_of: dict[WindowId, int] = {}
        cap = 1024
        self.kid: IntArray = np.full(cap, -1, dtype=np.int64)
        self.start: IntArray = np.zeros(cap, dtype=np.int64)
        self.next_seq: IntArray = np.zeros(cap, dtype=np.int64)
        #: a LATE update is pending (as stored)
        self.late: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.free: list[int] = list(range(cap - 1, -1, -1))
        #: windows with a LATE update pending, in marking order
        self.pending: dict[WindowId, None] = {}
        #: the earliest start of a pending window (None: nothing pending)
        self.first_pending: int | None = None

    def __len__(self) -> int:
        return len(self.slot_of)

    # -- slots --------------------------------------------------------------------------

    def _allocate(self, pairs: list[WindowId], next_seq: IntArray, late: BoolArray) -> IntArray:
        n = len(pairs)
        if len(self.free) < n:
            self._grow(n - len(self.free))
        taken = self.free[len(self.free) - n :]
        del self.free[len(self.free) - n :]
        slots = np.asarray(taken, dtype=np.int64)
        self.slot_of.update(zip(pairs, taken, strict=True))
        self.kid[slots] = [k for k, _ in pairs]
        self.start[slots] = [w for _, w in pairs]
        self.next_seq[slots] = next_seq
        self.late[slots] = late
        self.dirty[slots] = False
        return slots

    def _allocate_one(self, w: WindowId, next_seq: int, late: bool) -> int:
        seq = np.array([next_seq], dtype=np.int64)
        return int(self._allocate([w], seq, np.array([late]))[0])

    def _grow(self, need: int) -> None:
        cap = len(self.kid)
        extra = max(cap, need)
        self.kid = np.concatenate([self.kid, np.full(extra, -1, dtype=np.int64)])
        self.start = np.concatenate([self.start, np.zeros(extra, dtype=np.int64)])
        self.next_seq = np.concatenate([self.next_seq, np.zeros(extra, dtype=np.int64)])
        self.late = np.concatenate([self.late, np.zeros(extra, dtype=np.bool_)])
        self.dirty = np.concatenate([self.dirty, np.zeros(extra, dtype=np.bool_)])
        self.free.extend(range(cap + extra - 1, cap - 1, -1))

    def _release(self, slots: IntArray) -> None:
        if not len(slots):
            return
        for w in zip(self.kid[slots].tolist(), self.start[slots].tolist(), strict=True):
            del self.slot_of[w]
        self.kid[slots] = -1
        self.late[slots] = False
        self.dirty[slots] = False
        self.free.extend(slots.tolist())

    # -- emitting -----------------------------------------------------------------------

    def seqs(self, kind: Kind, kids: IntArray, starts: IntArray) -> IntArray:
        """The ``update_seq`` of each window emitted now (and advance them).

        The windows of one emission are distinct. An EARLY result gives a window a
        record; other kinds advance only the windows that have one.
        """
        n = len(kids)
        seqs = np.zeros(n, dtype=np.int64)
        if kind is not Kind.EARLY and not self.slot_of:
            return seqs
        pairs = list(zip(kids.tolist(), starts.tolist(), strict=True))
        slots = np.fromiter(map(self.slot_of.get, pairs, repeat(-1)), dtype=np.int64, count=n)
        if kind is Kind.EARLY:
            new = np.flatnonzero(slots < 0)
            if len(new):
                fresh = [pairs[i] for i in new.tolist()]
                first, late = np.zeros(len(new), np.int64), np.zeros(len(new), np.bool_)
                slots[new] = self._allocate(fresh, first, late)
        have = slots >= 0
        s = slots[have]
        seqs[have] = self.next_seq[s]
        self.next_seq[s] += 1
        self.dirty[s] = True
        return seqs

    def mark_late(self, w: WindowId, fired_before: Callable[[], bool], emit: bool) -> None:
        """A late event changed window ``w``; ``emit``: queue a LATE update for it.

        ``fired_before`` tells whether the window existed (so fired ON_TIME with seq 0)
        before this step, for a window that has no record yet.
        """
        s = self.slot_of.get(w)
        if s is None:
            s = self._load(w)
        if s is None:
            s = self._allocate_one(w, 1 if fired_before() else 0, True)
        if not emit:
            return
        self.late[s] = True
        self.dirty[s] = True
        self.pending[w] = None
        self._note_pending(w[1])

    def _note_pending(self, start: int) -> None:
        if self.first_pending is None or start < self.first_pending:
            self.first_pending = start

    def pending_upto(self, upto: int) -> bool:
        """Whether a window starting at or before ``upto`` has a LATE update pending."""
        return self.first_pending is not None and self.first_pending <= upto

    def take_pending(self, only_upto: int | None = None) -> list[WindowId]:
        """The pending windows (starting at or before ``only_upto``), in (start, key) order."""
        due = [w for w in self.pending if only_upto is None or w[1] <= only_upto]
        due.sort(key=lambda w: (w[1], w[0]))
        for w in due:
            del self.pending[w]
        if due:
            self.late[[self.slot_of[w] for w in due]] = False
            self.first_pending = min((w[1] for w in self.pending), default=None)
        return due

    def _load(self, w: WindowId) -> int | None:
        data = self.store.get(WINDOWS.cf, WINDOWS.key(w[1], self.keys.encoded[w[0]]))
        if data is None:
            return None
        seq, pending = WindowRecord.decode(data)
        return self._allocate_one(w, seq, pending)

    def live_kids(self) -> IntArray:
        """Key ids that memory refers to."""
        return self.kid[self.kid >= 0]

    def renumber_keys(self, remap: IntArray) -> None:
        """Apply a key table compaction (old id -> new id); every id here must be live."""
        held = self.kid >= 0
        self.kid[held] = remap[self.kid[held]]
        self.slot_of = {(int(remap[k]), w): s for (k, w), s in self.slot_of.items()}
        self.pending = {(int(remap[k]), w): None for k, w in self.pending}

    # -- persistence --------------------------------------------------------------------

    def persist(self, batch: StoreBatch) -> None:
        """Write the changed records into ``batch``."""
        slots = np.flatnonzero(self.dirty)
        if not len(slots):
            return
        enc = self.keys.encoded
        keys = WINDOWS.keys(self.start[slots].tolist(), [enc[k] for k in self.kid[slots].tolist()])
        values = WindowRecord.encode_many(self.next_seq[slots], self.late[slots])
        batch.put_many(WINDOWS.cf, keys, values)
        self.dirty[slots] = False

    def expire(self, batch: StoreBatch, cutoff: int) -> None:
        """Delete the records of windows starting at or before ``cutoff``."""
        batch.delete_keys(WINDOWS.upto(cutoff))
        self._release(np.flatnonzero((self.kid >= 0) & (self.start <= cutoff)))

    def evict(self, wm: int, size: int) -> None:
        """Forget fired windows with nothing pending (their records are in the store)."""
        self._release(np.flatnonzero((self.kid >= 0) & ~self.late & (self.start + size <= wm)))

    def restore(self, wm: int, size: int) -> None:
        """Load the records of open windows and of windows with a LATE update pending."""
        items = list(self.store.scan_range(WINDOWS.all()))
        if not items:
            return
        starts, names = WINDOWS.parse_many([k for k, _ in items])
        seqs, late = WindowRecord.decode_many([v for _, v in items])
        keep = np.flatnonzero(late | (starts + size > wm))
        kids = self.keys.ids_of([names[i] for i in keep.tolist()])
        pairs = list(zip(kids.tolist(), starts[keep].tolist(), strict=True))
        self._allocate(pairs, seqs[keep], late[keep])
        self.pending.update((w, None) for w, p in zip(pairs, late[keep].tolist(), strict=True) if p)
        if self.pending:
            self._note_pending(min(w[1] for w in self.pending))
