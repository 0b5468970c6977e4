"""What a join writes at a flush besides outer-join rows and rows windows: the accepted
messages of each input, the window frames and the expiry index, and what has expired.
"""

from __future__ import annotations

from stores.keys import MIN_I64
from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import IntArray
from window_operator.join.common import LEFT, RIGHT
from window_operator.join.layouts import StoreLayout
from window_operator.join.meta import SweepIndex, WindowFrames
from window_operator.join.spec import JoinSpec
from window_operator.join.state import MessageCodec
from window_operator.join.writes import PendingMessages
from window_operator.kernel.checkpoint import JsonValue

__all__ = ["JoinStorage"]


class JoinStorage:
    """Messages waiting for the Message Store, window metadata and expiry, per input.

    ``stored_max[side]`` is the latest event time ever staged (a restored cache is
    complete only above it); ``expired[side]`` the cut-off below which messages are
    gone. Both are checkpointed.
    """

    def __init__(self, spec: JoinSpec, codecs: tuple[MessageCodec, MessageCodec]) -> None:
        self.spec = spec
        self.codecs = codecs
        self.pending = (PendingMessages(), PendingMessages())
        self.frames = WindowFrames(spec.frame_ms)
        self.sweep = SweepIndex(spec.sweep_ms)
        self.stored_max: list[int | None] = [None, None]
        self.expired = [MIN_I64, MIN_I64]

    def stage(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        recs: list[bytes],
        seqs: IntArray | None,
        encoded: list[EncodedKey],
    ) -> None:
        """Queue accepted messages for the Message Store; update window and expiry meta."""
        self.pending[side].add(kids, ts, pos, recs, seqs)
        tmax = int(ts.max())
        prev = self.stored_max[side]
        self.stored_max[side] = tmax if prev is None else max(prev, tmax)
        self.frames.note(side, ts, pos)
        if self.spec.layout is StoreLayout.FIELDS_TS_OFFSET:
            self.sweep.note(side, kids, ts, encoded)

    def write_messages(self, batch: StoreBatch, encoded: list[EncodedKey]) -> None:
        """One bulk put of each input's staged messages."""
        for side in (LEFT, RIGHT):
            self.pending[side].write(self.codecs[side], encoded, batch)

    def write_meta(self, batch: StoreBatch) -> None:
        """Persist changed window frames and new expiry index entries."""
        self.frames.write(batch)
        self.sweep.write(batch)

    def expire(self, side: int, cut: int, batch: StoreBatch) -> bool:
        """Delete the messages of ``side`` below ``cut`` and their frames (time layouts:
        by range; rows joins expire their own); whether ``cut`` is new."""
        if cut <= self.expired[side]:
            return False
        layout = self.spec.layout
        if layout is StoreLayout.FIELDS_TS_OFFSET:
            self.sweep.expire(side, cut, self.codecs[side], batch)
        elif layout is not StoreLayout.FIELDS_OFFSET:
            batch.delete_keys(self.codecs[side].keyspace.times(MIN_I64, cut))
        self.frames.expire(side, cut, batch)
        self.expired[side] = cut
        return True

    def restore(self, store: TaskStore, fields: dict[str, JsonValue]) -> None:
        """Load the checkpoint fields of :meth:`to_json` and the persisted metadata."""
        self.stored_max = [None if t is None else int(t) for t in fields["stored_max"]]
        self.expired = [int(t) for t in fields["expired"]]
        for side in (LEFT, RIGHT):
            self.frames.restore(side, store)
            self.sweep.restore(side, store)

    def to_json(self) -> dict[str, JsonValue]:
        """Checkpoint fields."""
        return {"stored_max": self.stored_max, "expired": self.expired}
