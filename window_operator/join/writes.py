"""Messages accepted but not yet in the Message Store, and their bulk write at a flush."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch
from window_operator.arrays import IntArray
from window_operator.join.common import EMPTY, obj_array
from window_operator.join.state import MessageCodec

__all__ = ["PendingMessages"]


@dataclass(slots=True)
class PendingMessages:
    """Accepted messages of one input not yet written to the Message Store."""

    kids: list[IntArray] = field(default_factory=list)
    ts: list[IntArray] = field(default_factory=list)
    pos: list[IntArray] = field(default_factory=list)
    recs: list[list[bytes]] = field(default_factory=list)
    seqs: list[IntArray] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.kids)

    def add(
        self, kids: IntArray, ts: IntArray, pos: IntArray, recs: list[bytes], seqs: IntArray | None
    ) -> None:
        """Queue messages (``seqs``: arrival sequence numbers, rows joins only)."""
        self.kids.append(kids)
        self.ts.append(ts)
        self.pos.append(pos)
        self.recs.append(recs)
        if seqs is not None:
            self.seqs.append(seqs)

    def clear(self) -> None:
        """Forget the queued messages."""
        self.kids, self.ts, self.pos, self.recs, self.seqs = [], [], [], [], []

    def write(self, codec: MessageCodec, encoded: list[EncodedKey], batch: StoreBatch) -> None:
        """One bulk put of the staged messages, in key order (RocksDB inserts a sorted
        batch markedly faster than a random one); the queue is then empty."""
        if not self:
            return
        keys, values = codec.encode(
            encoded,
            np.concatenate(self.kids),
            np.concatenate(self.ts),
            np.concatenate(self.pos),
            np.concatenate(self.seqs) if self.seqs else EMPTY,
            obj_array([r for chunk in self.recs for r in chunk]),
        )
        batch.put_many(codec.keyspace.cf, keys, values)
        self.clear()
