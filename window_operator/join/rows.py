"""Rows joins (``ROWS n PRECEDING``): the stored messages of each input per join key, in
arrival order; a right message joins the ``n`` latest left messages of its key, a left
message every retained right message of its key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stores.keys import MIN_I64
from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import IntArray
from window_operator.join.common import LEFT, obj_array
from window_operator.join.keys import JoinKeyTable
from window_operator.join.reads import Partners
from window_operator.join.state import MessageCodec

__all__ = ["RowsEntry", "RowsWindows"]


@dataclass(slots=True)
class RowsEntry:
    """A stored message of a rows join."""

    seq: int
    ts: int
    pos: int
    rec: bytes


class RowsWindows:
    """The retained messages of both inputs of a rows join, by side and key id.

    ``deletes`` collects the Message Store keys of messages that left their window or
    retention (written at the next flush); ``swept`` is, per side, the cut-off of the
    last retention sweep.
    """

    def __init__(self, codecs: tuple[MessageCodec, MessageCodec]) -> None:
        self.codecs = codecs
        self.state: tuple[dict[int, list[RowsEntry]], dict[int, list[RowsEntry]]] = ({}, {})
        self.deletes: list[bytes] = []
        self.swept = [MIN_I64, MIN_I64]

    def add(
        self,
        side: int,
        n_rows: int,
        floor: int,
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        recs: list[bytes],
        seqs: IntArray,
        encoded: list[EncodedKey],
    ) -> Partners:
        """Join new messages of ``side`` against the other side, then retain them.

        Partners with ``ts`` below ``floor`` are invisible.
        """
        other = self.state[1 - side]
        mine = self.state[side]
        p_own: list[int] = []
        p_ts: list[int] = []
        p_pos: list[int] = []
        p_rec: list[bytes] = []
        keyspace = self.codecs[LEFT].keyspace
        columns = zip(kids.tolist(), seqs.tolist(), ts.tolist(), pos.tolist(), recs, strict=True)
        for j, (kid, seq, t, p, rec) in enumerate(columns):
            for e in other.get(kid, ()):
                if e.ts >= floor:
                    p_own.append(j)
                    p_ts.append(e.ts)
                    p_pos.append(e.pos)
                    p_rec.append(e.rec)
            entries = mine.setdefault(kid, [])
            entries.append(RowsEntry(seq, t, p, rec))
            if side == LEFT and len(entries) > n_rows:
                # only the n latest lefts of a key can still be joined
                enc = encoded[kid]
                for old in entries[:-n_rows]:
                    self.deletes.append(keyspace.key(fields=enc, offset=old.seq))
                del entries[:-n_rows]
        return Partners(
            np.asarray(p_own, dtype=np.int64),
            np.asarray(p_ts, dtype=np.int64),
            np.asarray(p_pos, dtype=np.int64),
            obj_array(p_rec),
        )

    def expire(self, side: int, cut: int, sweep_ms: int, encoded: list[EncodedKey]) -> None:
        """Drop entries past retention (swept once per ``sweep_ms``).

        A left entry still holds its place among the ``n`` latest of its key after it
        expired (it is invisible, ``ts`` below every later floor): only the expired
        entries older by arrival than every retained one go, or an older retained
        entry would take the expired one's place and join again.
        """
        if cut < self.swept[side] + sweep_ms:
            return
        self.swept[side] = cut
        keyspace = self.codecs[side].keyspace
        state = self.state[side]
        for kid in list(state):
            entries = state[kid]
            if side == LEFT:
                first = next((i for i, e in enumerate(entries) if e.ts >= cut), len(entries))
                gone, keep = entries[:first], entries[first:]
            else:
                gone = [e for e in entries if e.ts < cut]
                keep = [e for e in entries if e.ts >= cut]
            if not gone:
                continue
            for e in gone:
                self.deletes.append(keyspace.key(fields=encoded[kid], offset=e.seq))
            if keep:
                state[kid] = keep
            else:
                del state[kid]

    def write(self, batch: StoreBatch) -> None:
        """Delete the messages that left their window or retention since the last write."""
        cf = self.codecs[LEFT].keyspace.cf
        for key in self.deletes:
            batch.delete(cf, key)
        self.deletes = []

    def restore(self, side: int, store: TaskStore, keys: JoinKeyTable) -> None:
        """Load the stored messages of ``side`` (interning their join keys)."""
        codec = self.codecs[side]
        items = list(store.scan_range(codec.keyspace.all()))
        msgs = codec.decode([k for k, _ in items], [v for _, v in items])
        assert msgs.seq is not None
        state = self.state[side]
        for enc, seq, t, p, rec in zip(
            msgs.fields,
            msgs.seq.tolist(),
            msgs.ts.tolist(),
            msgs.pos.tolist(),
            msgs.rec,
            strict=True,
        ):
            state.setdefault(keys.from_encoded(enc), []).append(RowsEntry(seq, t, p, rec))

    def live_kids(self) -> list[IntArray]:
        """The key ids the retained messages refer to."""
        return [np.asarray(list(entries), dtype=np.int64) for entries in self.state]

    def remap(self, remap: IntArray) -> None:
        """Renumber the key ids (old id -> ``remap[old]``)."""
        left, right = self.state
        self.state = (
            {int(remap[k]): v for k, v in left.items()},
            {int(remap[k]): v for k, v in right.items()},
        )
