"""The seed's window and message access: window metadata per frame (optionally for one
join key) and the stored messages of an input in a ``(ts, position)`` range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from stores.keys import MIN_I64
from window_operator.join.cache import SideCache
from window_operator.join.common import LEFT, MAX_OFFSET, POSITION_BITS, RIGHT, JoinKey
from window_operator.join.keys import JoinKeyTable
from window_operator.join.reads import MessageReader
from window_operator.join.results import JoinMessage, JoinWindow
from window_operator.join.rows import RowsWindows
from window_operator.join.spec import JoinSpec
from window_operator.join.storage import JoinStorage

__all__ = ["JoinQueries"]

#: A found message: key id, event time, record JSON (by position).
_Found = dict[int, tuple[int, int, bytes]]


@dataclass(eq=False)
class JoinQueries:
    """Reads windows and stored messages of a join's state (memory and store)."""

    spec: JoinSpec
    keys: JoinKeyTable
    reader: MessageReader
    caches: tuple[SideCache, SideCache]
    rows: RowsWindows
    storage: JoinStorage

    def windows(self, key: JoinKey | None, start: int, end: int) -> list[JoinWindow]:
        """:meth:`JoinOperator.get_windows`: frame metadata, or one key's frames."""
        frame = self.spec.frame_ms
        names = self.spec.names
        out: list[JoinWindow] = []
        if key is None:
            expired = self.storage.expired
            for (side, f), m in self.storage.frames.meta.items():
                if f < end and f + frame > start and f + frame > expired[side]:
                    out.append(JoinWindow(names[side], None, f, f + frame, *m))
        else:
            for side in (LEFT, RIGHT):
                out.extend(self._key_windows(side, self.normalize(key), start, end))
        out.sort(key=lambda w: (w.start, names.index(w.source)))
        return out

    def _key_windows(self, side: int, key: JoinKey, start: int, end: int) -> list[JoinWindow]:
        """The frames of ``side`` overlapping ``[start, end)``, of ``key``'s messages only."""
        frame = self.spec.frame_ms
        per: dict[int, list[int]] = {}
        lo = start - start % frame
        for msg in self.messages(side, (lo, MIN_I64), (end - 1, -MIN_I64 - 1), [key]):
            f = msg.ts - msg.ts % frame
            p = msg.position
            got = per.get(f)
            if got is None:
                per[f] = [1, msg.ts, msg.ts, p, p]
            else:
                got[0] += 1
                got[1], got[2] = min(got[1], msg.ts), max(got[2], msg.ts)
                got[3], got[4] = min(got[3], p), max(got[4], p)
        fields = self.keys.fields_of(key)
        name = self.spec.names[side]
        return [JoinWindow(name, fields, f, f + frame, *meta) for f, meta in per.items()]

    def messages(
        self,
        side: int,
        lo: tuple[int, int],
        hi: tuple[int, int],
        join_keys: Sequence[JoinKey] | None = None,
    ) -> list[JoinMessage]:
        """:meth:`JoinOperator.get_messages` of input ``side``, ``(ts, position)`` in
        ``[lo, hi]``."""
        kids = None
        if join_keys is not None:
            kids = [self.keys.id_of(self.normalize(k)) for k in join_keys]
        floor = max(lo[0], self.storage.expired[side])
        found = self._found(side, kids, floor, hi[0])
        rank = {kid: i for i, kid in enumerate(kids)} if kids is not None else None
        picked = [
            (pos, kid, ts, rec)
            for pos, (kid, ts, rec) in found.items()
            if lo <= (ts, pos) <= hi and ts >= floor and (rank is None or kid in rank)
        ]
        if rank is None:
            picked.sort(key=lambda m: (m[2], m[0]))
        else:
            picked.sort(key=lambda m: (rank[m[1]], m[2], m[0]))
        source = self.spec.names[side]
        return [
            JoinMessage(
                source,
                self.keys.fields(kid),
                ts,
                pos >> POSITION_BITS,
                pos & MAX_OFFSET,
                orjson.loads(rec),
            )
            for pos, kid, ts, rec in picked
        ]

    def _found(self, side: int, kids: list[int] | None, floor: int, end_ts: int) -> _Found:
        """Candidate messages by position: rows windows, or the store plus the cache."""
        found: _Found = {}
        if self.spec.rows is not None:
            for kid, entries in self.rows.state[side].items():
                for e in entries:
                    found[e.pos] = (kid, e.ts, e.rec)
        elif floor <= end_ts:
            got = self.reader.scan(side, kids, floor, end_ts)
            for kid, ts, pos, rec in zip(
                got.kid.tolist(), got.ts.tolist(), got.pos.tolist(), got.rec, strict=True
            ):
                found[pos] = (kid, ts, rec)
            cache = self.caches[side]
            sel = np.flatnonzero((cache.ts >= floor) & (cache.ts <= end_ts))
            for i in sel.tolist():
                found[int(cache.pos[i])] = (int(cache.kid[i]), int(cache.ts[i]), cache.rec[i])
        return found

    def normalize(self, key: JoinKey) -> JoinKey:
        """A join key as the operator interns it; ``ValueError`` for the wrong arity."""
        if self.keys.single:
            if isinstance(key, tuple):
                if len(key) != 1:
                    raise ValueError(f"a join key has 1 field, got {key!r}")
                return key[0]
            return key
        key = tuple(key) if isinstance(key, tuple | list) else (key,)
        if len(key) != len(self.spec.on):
            raise ValueError(f"a join key has {len(self.spec.on)} fields, got {key!r}")
        return key
