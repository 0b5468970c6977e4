"""Window bookkeeping: update sequence numbers and pending LATE updates.

Only windows with a history need a record: those emitted EARLY (their next ON_TIME is
not ``update_seq`` 0) and those changed by late events (a LATE update is pending or was
sent). Every other window's first result has ``update_seq`` 0 and needs nothing stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import IntArray
from window_operator.keytable import KeyTable
from window_operator.results import Kind
from window_operator.timewindows.state import WINDOWS, WindowRecord

__all__ = ["WindowBook", "WindowMeta"]

WindowId = tuple[int, int]
"""``(key id, window start)``."""


@dataclass(slots=True)
class WindowMeta:
    """The next ``update_seq`` of a window and whether a LATE update is pending."""

    next_seq: int
    pending: bool


class WindowBook:
    """Bookkeeping of windows with a history, cached and written back per flush."""

    def __init__(self, store: TaskStore, keys: KeyTable[str]) -> None:
        self.store = store
        self.keys = keys
        self.meta: dict[WindowId, WindowMeta] = {}
        self.dirty: set[WindowId] = set()
        #: windows with a LATE update pending, in marking order
        self.pending: dict[WindowId, None] = {}

    def seqs(self, kind: Kind, kids: IntArray, starts: IntArray) -> IntArray:
        """The ``update_seq`` of each window emitted now (and advance them)."""
        n = len(kids)
        seqs = np.zeros(n, dtype=np.int64)
        if kind is not Kind.EARLY and not self.meta:
            return seqs
        kid_l, start_l = kids.tolist(), starts.tolist()
        for i in range(n):
            w = (kid_l[i], start_l[i])
            meta = self.meta.get(w)
            if meta is None:
                if kind is not Kind.EARLY:
                    continue
                meta = self.meta[w] = WindowMeta(0, False)
            seqs[i] = meta.next_seq
            meta.next_seq += 1
            self.dirty.add(w)
        return seqs

    def mark_late(self, w: WindowId, fired_before: Callable[[], bool], emit: bool) -> None:
        """A late event changed window ``w``; ``emit``: queue a LATE update for it.

        ``fired_before`` tells whether the window existed (so fired ON_TIME with seq 0)
        before this step, for a window that has no record yet.
        """
        meta = self.meta.get(w) or self._load(w)
        if meta is None:
            meta = self.meta[w] = WindowMeta(1 if fired_before() else 0, True)
        if not emit:
            return
        meta.pending = True
        self.dirty.add(w)
        self.pending[w] = None

    def take_pending(self, only_upto: int | None = None) -> list[WindowId]:
        """The pending windows (starting at or before ``only_upto``), in (start, key) order."""
        due = [w for w in self.pending if only_upto is None or w[1] <= only_upto]
        due.sort(key=lambda w: (w[1], w[0]))
        for w in due:
            del self.pending[w]
            self.meta[w].pending = False
        return due

    def _load(self, w: WindowId) -> WindowMeta | None:
        data = self.store.get(WINDOWS.cf, WINDOWS.key(w[1], self.keys.encoded[w[0]]))
        if data is None:
            return None
        seq, pending = WindowRecord.decode(data)
        meta = self.meta[w] = WindowMeta(seq, pending)
        return meta

    def live_kids(self) -> IntArray:
        """Key ids that memory refers to."""
        return np.fromiter((w[0] for w in self.meta), dtype=np.int64, count=len(self.meta))

    def renumber_keys(self, remap: IntArray) -> None:
        """Apply a key table compaction (old id -> new id); every id here must be live."""

        def re(w: WindowId) -> WindowId:
            return int(remap[w[0]]), w[1]

        self.meta = {re(w): m for w, m in self.meta.items()}
        self.dirty = {re(w) for w in self.dirty}
        self.pending = {re(w): None for w in self.pending}

    # -- persistence --------------------------------------------------------------------

    def persist(self, batch: StoreBatch) -> None:
        """Write the changed records into ``batch``."""
        enc = self.keys.encoded
        for w in self.dirty:
            meta = self.meta.get(w)
            if meta is not None:
                batch.put(
                    WINDOWS.cf,
                    WINDOWS.key(w[1], enc[w[0]]),
                    WindowRecord.encode(meta.next_seq, meta.pending),
                )
        self.dirty.clear()

    def expire(self, batch: StoreBatch, cutoff: int) -> None:
        """Delete the records of windows starting at or before ``cutoff``."""
        batch.delete_keys(WINDOWS.upto(cutoff))
        for w in [w for w in self.meta if w[1] <= cutoff]:
            del self.meta[w]

    def evict(self, wm: int, size: int) -> None:
        """Forget fired windows with nothing pending (their records are in the store)."""
        for w in [w for w, m in self.meta.items() if not m.pending and w[1] + size <= wm]:
            del self.meta[w]

    def restore(self, wm: int, size: int) -> None:
        """Load the records of open windows and of windows with a LATE update pending."""
        items = list(self.store.scan_range(WINDOWS.all()))
        if not items:
            return
        starts, names = WINDOWS.parse_many([k for k, _ in items])
        for w_start, key, (_, v) in zip(starts.tolist(), names, items, strict=True):
            seq, pending = WindowRecord.decode(v)
            w = (self.keys.id_of(key), w_start)
            if pending or w_start + size > wm:
                self.meta[w] = WindowMeta(seq, pending)
            if pending:
                self.pending[w] = None
