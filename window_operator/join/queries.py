"""The seed's window and message access: window metadata per frame (optionally for one
join key) and the stored messages of an input in a ``(ts, position)`` range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import orjson

from stores.keys import MIN_I64
from window_operator.join.cache import SideCache
from window_operator.join.common import LEFT, MAX_OFFSET, POSITION_BITS, RIGHT, UnknownSourceError
from window_operator.join.keys import KeyTable
from window_operator.join.meta import WindowFrames
from window_operator.join.reads import MessageReader
from window_operator.join.results import JoinMessage, JoinWindow
from window_operator.join.rows import RowsWindows
from window_operator.join.spec import JoinSpec

__all__ = ["JoinQueries"]


class JoinQueries:
    """Input names, windows and stored messages of a :class:`JoinOperator`.

    A base class of the operator: it reads the operator's state, declared below.
    """

    spec: JoinSpec
    _side_of: dict[str, int]
    _keys: KeyTable
    _reader: MessageReader
    _cache: tuple[SideCache, SideCache]
    _rows: RowsWindows
    _frames: WindowFrames
    _expired: list[int]

    def side_of(self, source: str) -> int:
        """:data:`LEFT` or :data:`RIGHT` for an input name."""
        side = self._side_of.get(source)
        if side is None:
            raise UnknownSourceError(
                f"unknown source {source!r}: expected {self.spec.left!r} or {self.spec.right!r}"
            )
        return side

    @overload
    def get_windows(self, start: int, end: int, /) -> list[JoinWindow]: ...

    @overload
    def get_windows(self, join_key: Any, start: int, end: int, /) -> list[JoinWindow]: ...

    def get_windows(self, *args: Any) -> list[JoinWindow]:
        """``get_windows([join_key,] start, end)``: windows of both inputs overlapping
        ``[start, end)``, sorted by start then input.

        Without a join key: the frames' metadata from the Window Meta Store; with one:
        the same frames restricted to that key's messages (read from the Message Store).
        """
        if len(args) == 2:
            join_key, (start, end) = None, args
        elif len(args) == 3:
            join_key, start, end = args
        else:
            raise TypeError("get_windows([join_key,] start, end)")
        frame = self.spec.frame_ms
        out: list[JoinWindow] = []
        names = self.spec.names
        if join_key is None:
            for (side, f), m in self._frames.meta.items():
                if f < end and f + frame > start and f + frame > self._expired[side]:
                    out.append(JoinWindow(names[side], None, f, f + frame, *m))
        else:
            kv = self._normalize_key(join_key)
            fields = (kv,) if self._keys.single else tuple(kv)
            lo = start - start % frame
            for side in (LEFT, RIGHT):
                msgs = self.get_messages(names[side], lo, MIN_I64, end - 1, -MIN_I64 - 1, [kv])
                per: dict[int, list[int]] = {}
                for msg in msgs:
                    f = msg.ts - msg.ts % frame
                    p = msg.position
                    got = per.get(f)
                    if got is None:
                        per[f] = [1, msg.ts, msg.ts, p, p]
                    else:
                        got[0] += 1
                        got[1], got[2] = min(got[1], msg.ts), max(got[2], msg.ts)
                        got[3], got[4] = min(got[3], p), max(got[4], p)
                for f, meta in per.items():
                    out.append(JoinWindow(names[side], fields, f, f + frame, *meta))
        out.sort(key=lambda w: (w.start, self._side_of[w.source]))
        return out

    def get_messages(
        self,
        source: str,
        start_ts: int,
        start_offset: int,
        end_ts: int,
        end_offset: int,
        join_keys: Sequence[Any] | None = None,
    ) -> list[JoinMessage]:
        """Stored messages of ``source`` with ``(ts, position)`` in
        ``[(start_ts, start_offset), (end_ts, end_offset)]`` (positions:
        :func:`message_position`), optionally only those of ``join_keys``.

        Unkeyed results are in ``(ts, position)`` order, keyed ones by key (in the given
        order) then ``(ts, position)``. Expired messages are never returned.
        """
        side = self.side_of(source)
        kids = None
        if join_keys is not None:
            kids = [self._keys.id_of(self._normalize_key(k)) for k in join_keys]
        floor = max(start_ts, self._expired[side])
        found: dict[int, tuple[int, int, bytes]] = {}
        if self.spec.rows is not None:
            for kid, entries in self._rows.state[side].items():
                for e in entries:
                    found[e.pos] = (kid, e.ts, e.rec)
        elif floor <= end_ts:
            for kid, ts, pos, rec in self._reader.scan(side, kids, floor, end_ts):
                found[pos] = (kid, ts, rec)
            cache = self._cache[side]
            sel = np.flatnonzero((cache.ts >= floor) & (cache.ts <= end_ts))
            for i in sel.tolist():
                found[int(cache.pos[i])] = (int(cache.kid[i]), int(cache.ts[i]), cache.rec[i])
        lo, hi = (start_ts, start_offset), (end_ts, end_offset)
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
        return [
            JoinMessage(
                source,
                self._keys.fields(kid),
                ts,
                pos >> POSITION_BITS,
                pos & MAX_OFFSET,
                orjson.loads(rec),
            )
            for pos, kid, ts, rec in picked
        ]

    def _normalize_key(self, key: Any) -> Any:
        if self._keys.single:
            if isinstance(key, tuple):
                if len(key) != 1:
                    raise ValueError(f"a join key has 1 field, got {key!r}")
                return key[0]
            return key
        key = tuple(key)
        if len(key) != len(self.spec.on):
            raise ValueError(f"a join key has {len(self.spec.on)} fields, got {key!r}")
        return key
