"""Join results as they are emitted: matches of new messages with their partners, and
outer-join rows (unmatched, or retracted), in columnar batches."""

from __future__ import annotations

import numpy as np

from window_operator.arrays import IntArray, ObjArray
from window_operator.join.common import LEFT
from window_operator.join.keys import JoinKeyTable
from window_operator.join.outer import OuterRow
from window_operator.join.reads import Partners
from window_operator.join.results import JoinKind, JoinResultBatch
from window_operator.kernel import OutputBuffer

__all__ = ["JoinEmitter"]


class JoinEmitter:
    """Builds result batches into the operator's output buffer."""

    def __init__(self, keys: JoinKeyTable, outputs: OutputBuffer[JoinResultBatch]) -> None:
        self.keys = keys
        self.outputs = outputs

    def matches(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        rec: ObjArray,
        partners: Partners,
    ) -> None:
        """``MATCH`` results of new messages of ``side`` (``kids``/``ts``/``pos``/``rec``)
        with their partners (``partners.probe`` indexes the new messages)."""
        p = partners.probe
        keys = self.keys.json_array()[kids[p]].tolist()
        own, own_ts, own_pos = rec[p].tolist(), ts[p], pos[p]
        other = partners.rec.tolist()
        kind = JoinKind.MATCH
        if side == LEFT:
            batch = JoinResultBatch(
                kind, keys, own, other, own_ts, partners.ts, own_pos, partners.pos
            )
        else:
            batch = JoinResultBatch(
                kind, keys, other, own, partners.ts, own_ts, partners.pos, own_pos
            )
        self.outputs.emit(batch)

    def rows(self, kind: JoinKind, side: int, rows: list[OuterRow]) -> None:
        """Outer-join rows of ``side`` (``*_UNMATCHED`` or ``RETRACT``)."""
        keys = [self.keys.json[r.kid] for r in rows]
        recs = [r.rec for r in rows]
        ts = np.asarray([r.ts for r in rows], dtype=np.int64)
        pos = np.asarray([r.pos for r in rows], dtype=np.int64)
        if side == LEFT:
            self.outputs.emit(JoinResultBatch(kind, keys, recs, None, ts, None, pos, None))
        else:
            self.outputs.emit(JoinResultBatch(kind, keys, None, recs, None, ts, None, pos))
