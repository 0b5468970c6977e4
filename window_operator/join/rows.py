"""Rows joins (``ROWS n PRECEDING``): the stored messages of each input per join key, in
arrival order; a right message joins the ``n`` latest left messages of its key, a left
message every retained right message of its key.
"""

from __future__ import annotations

from dataclasses import dataclass

from stores.keys import MIN_I64, decode_i64, encode_i64, prefix_upper_bound
from stores.rocks import ColumnFamily, TaskStore
from window_operator.join.common import LEFT
from window_operator.join.keys import KeyTable
from window_operator.join.layouts import MSG_TAG, StoreLayout, decode_message

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

    def __init__(self) -> None:
        self.state: tuple[dict[int, list[RowsEntry]], dict[int, list[RowsEntry]]] = ({}, {})
        self.deletes: list[bytes] = []
        self.swept = [MIN_I64, MIN_I64]

    def add(
        self,
        side: int,
        n_rows: int,
        floor: int,
        kids: list[int],
        ts: list[int],
        pos: list[int],
        recs: list[bytes],
        seqs: list[int],
        encoded: list[bytes],
    ) -> tuple[list[int], list[int], list[bytes]]:
        """Join new messages of ``side`` against the other side, then retain them.

        Partners with ``ts`` below ``floor`` are invisible. Returns, per match, the index
        of the new message, and the partner's event time and record.
        """
        other = self.state[1 - side]
        mine = self.state[side]
        p_own: list[int] = []
        p_ts: list[int] = []
        p_rec: list[bytes] = []
        tag = MSG_TAG[LEFT]
        for j, kid in enumerate(kids):
            for e in other.get(kid, ()):
                if e.ts >= floor:
                    p_own.append(j)
                    p_ts.append(e.ts)
                    p_rec.append(e.rec)
            entries = mine.setdefault(kid, [])
            entries.append(RowsEntry(seqs[j], ts[j], pos[j], recs[j]))
            if side == LEFT and len(entries) > n_rows:
                # only the n latest lefts of a key can still be joined
                enc = encoded[kid]
                for old in entries[:-n_rows]:
                    self.deletes.append(tag + enc + encode_i64(old.seq))
                del entries[:-n_rows]
        return p_own, p_ts, p_rec

    def expire(self, side: int, cut: int, sweep_ms: int, encoded: list[bytes]) -> None:
        """Drop entries past retention (swept once per ``sweep_ms``)."""
        if cut < self.swept[side] + sweep_ms:
            return
        self.swept[side] = cut
        tag = MSG_TAG[side]
        state = self.state[side]
        for kid in list(state):
            entries = state[kid]
            keep = [e for e in entries if e.ts >= cut]
            if len(keep) == len(entries):
                continue
            for e in entries:
                if e.ts < cut:
                    self.deletes.append(tag + encoded[kid] + encode_i64(e.seq))
            if keep:
                state[kid] = keep
            else:
                del state[kid]

    def restore(self, side: int, store: TaskStore, layout: StoreLayout, keys: KeyTable) -> None:
        """Load the stored messages of ``side`` (interning their join keys)."""
        tag = MSG_TAG[side]
        state = self.state[side]
        for k, v in store.scan(ColumnFamily.MESSAGES, tag, prefix_upper_bound(tag)):
            enc, t, p, rec = decode_message(layout, k, v)
            kid = keys.from_encoded(enc)
            state.setdefault(kid, []).append(RowsEntry(decode_i64(k, len(k) - 8), t, p, rec))
