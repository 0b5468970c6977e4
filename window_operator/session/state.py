"""The state of a session operator, shared by the parts that make it up.

:class:`SessionState` sets up the configuration, the interned keys, the session cache,
the record codec, the checkpointed progress (offsets, watermark, ...) and the output
buffers. The other modules of this package add behaviour to it (loading, merging,
emission, persistence, expiry, checkpoints); :class:`SessionAggregator` combines them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stores.rocks import TaskStore
from window_operator.aggset import AggregationSet
from window_operator.config import SessionWindow
from window_operator.events import RecordDecoder
from window_operator.policies import NO_WATERMARK, EmitPolicy
from window_operator.results import ErrorRecord, ResultBatch
from window_operator.session.arrays import IntArray
from window_operator.session.keys import SessionKeys
from window_operator.session.records import (
    MAX_BUCKET_MS,
    MIN_BUCKET_MS,
    PendingMessage,
    RecordCodec,
)
from window_operator.session.slots import Slots

__all__ = ["SessionState"]


class SessionState:
    """Fields of a session operator (no store access: restoring is the operator's job)."""

    def __init__(
        self,
        *,
        window: SessionWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        decoder: RecordDecoder | None = None,
    ) -> None:
        self.window = window
        self.aggs = aggregations
        self.policy = policy
        self.store = store
        self.decoder = decoder
        self.by_offsets = window.max_idle_messages is not None
        if window.gap is not None:
            self._gap = int(window.gap)
        else:
            assert window.max_idle_messages is not None
            self._gap = int(window.max_idle_messages)
        #: reported window_end = last + pad: the gap for time, one offset for tuple sessions
        self._pad = 1 if self.by_offsets else self._gap
        self.keys = SessionKeys(per_partition=self.by_offsets)
        self.slots = Slots(aggregations.width)
        self.codec = RecordCodec(self.keys, self.slots, aggregations, self._pad)
        # checkpointed
        self._offsets: dict[int, int] = {}
        self._max_ts: dict[int, int] = {}
        self._wm = NO_WATERMARK
        self._late_since: int | None = None
        self._last_early: int | None = None
        self._expired_upto: int | None = None
        self._max_len = 0
        self._bucket = min(max(self._gap, MIN_BUCKET_MS), MAX_BUCKET_MS)
        self.batches = 0
        # wall clock
        self._now = NO_WATERMARK
        self._last_active: dict[int, int] = {}
        # Upper bound of the end of any session of a key that is stored but not cached:
        # a batch session starting after it cannot touch anything on disk.
        self._disk_end: IntArray = np.zeros(0, dtype=np.int64)
        self._disk_end_default = NO_WATERMARK
        # store records superseded in memory (merged away), deleted at the next flush
        self._deletes: dict[tuple[int, int], bool] = {}
        self._messages: list[PendingMessage] = []
        self._eot = False
        # outputs
        self._results: list[ResultBatch] = []
        self._errors: list[ErrorRecord] = []

    def _objs_of(self, slots: IntArray) -> list[list[Any]] | None:
        """The object accumulators of ``slots`` (None when there are no object operations)."""
        if not self.aggs.objects:
            return None
        out: list[list[Any]] = []
        for s in slots.tolist():
            o = self.slots.objs[s]
            assert o is not None
            out.append(o)
        return out
