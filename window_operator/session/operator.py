"""The session window operator: the :class:`~window_operator.operator.WindowOperator` API.

:class:`SessionAggregator` combines the parts of this package (input handling, merging,
emission, persistence, expiry, checkpoints) over one :class:`SessionState` and exposes
the protocol: adding records, timeouts, results and errors, flush, close, queries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from stores.keys import encode_i64, encode_str, prefix_upper_bound
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.aggregator import StepStats, StoredWindow
from window_operator.aggset import AggregationSet
from window_operator.clock import OutputBuffer
from window_operator.config import SessionWindow
from window_operator.events import EventBatch, RecordDecoder, RecordRejected
from window_operator.kernel import InputPosition
from window_operator.policies import END_OF_TIME, EmitPolicy, LateMode
from window_operator.results import ErrorRecord
from window_operator.session.checkpoint import CHECKPOINT_KEY, SessionCheckpoint
from window_operator.session.expiry import SessionExpiry
from window_operator.session.ingest import SessionIngest
from window_operator.session.keys import MIN_I64_BYTES, SESSION_TAG, clamp_i64
from window_operator.session.persistence import SessionPersistence

__all__ = ["SessionAggregator"]


def _raw(message: Any) -> bytes:
    try:
        return orjson.dumps(message)
    except TypeError:
        return repr(message).encode()


class SessionAggregator(
    SessionIngest, SessionPersistence, SessionExpiry, SessionCheckpoint, OutputBuffer
):
    """A task's session window aggregation over RocksDB (time or tuple sessions).

    Implements :class:`~window_operator.operator.WindowOperator`.
    """

    def __init__(
        self,
        *,
        window: SessionWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        decoder: RecordDecoder | None = None,
    ) -> None:
        super().__init__(
            window=window,
            aggregations=aggregations,
            policy=policy,
            store=store,
            decoder=decoder,
        )
        self._restore()

    # ------------------------------------------------------------------ properties

    @property
    def watermark(self) -> int:
        """The event-time watermark (min over active partitions, never decreasing).

        Tuple sessions report it too, but close by offsets.
        """
        return self._wm

    @property
    def offsets(self) -> dict[InputPosition, int]:
        """Last applied offset per input partition."""
        return {InputPosition(0, p): o for p, o in sorted(self._offsets.items())}

    # ------------------------------------------------------------------ public API

    def add_message(
        self,
        message: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> StepStats:
        """Add one decoded input record.

        The same semantics as a batch of one, through a scalar path: a batch of one would
        pay the whole vectorized pipeline's fixed cost per message.
        """
        if self.decoder is None:
            raise ValueError("add_message needs a RecordDecoder (build the operator from a job)")
        last = self._offsets.get(partition, -1)
        if offset is not None and offset <= last:
            return StepStats(replayed=1)
        try:
            event = self.decoder.decode_one(message)
        except RecordRejected as rej:
            off = last + 1 if offset is None else offset
            self._errors.append(ErrorRecord(rej.code, rej.reason, partition, off, _raw(message)))
            self.mark_consumed(partition, off)
            return StepStats(rejected=1)
        return self._add_one(event, partition, last + 1 if offset is None else offset, wall_ms)

    def mark_consumed(self, partition: int, offset: int, *, source: int = 0) -> None:
        """Record that ``offset`` of ``partition`` was handled outside (e.g. sent to errors).

        For tuple sessions such a record counts as a message without the key.
        """
        if offset > self._offsets.get(partition, -1):
            self._offsets[partition] = offset
            if self.by_offsets:
                self._fire()

    def add_batch(self, batch: EventBatch | Sequence[Mapping[str, Any]]) -> StepStats:
        """Add many messages at once (columns, or records decoded with the job's decoder).

        Retention is decided with the watermark as it stood before the batch, so a
        replayed batch decides the same way; after RETRACTs are applied, the final
        sessions and values equal those of adding the messages one by one.
        """
        if not isinstance(batch, EventBatch):
            if self.decoder is None:
                raise ValueError("add_batch of records needs a RecordDecoder")
            decoded = self.decoder.decode_records(list(batch))
            self._errors.extend(decoded.errors)
            stats = self._add_columns(decoded.batch)
            return StepStats(
                stats.applied, stats.replayed, stats.rejected + len(decoded.errors), stats.late
            )
        return self._add_columns(batch)

    def timeout(self, now_ms: int) -> None:
        """Run the wall-clock policies at ``now_ms``; :data:`END_OF_TIME` ends the input."""
        if now_ms >= END_OF_TIME:
            self._now = END_OF_TIME
            self._eot = True
            self._advance_watermark(END_OF_TIME)
            if self.by_offsets:
                self._fire()
            self._emit_late()
            return
        self._now = max(self._now, now_ms)
        if self.policy.idle_timeout is not None and self._max_ts:
            self._advance_watermark(self._coalesced_watermark())
        p = self.policy
        if p.late_mode is LateMode.PERIOD and self._pending_slots().size:
            if self._late_since is None:
                self._late_since = self._now
            elif self._now >= self._late_since + p.late_period:
                self._emit_late()
        if p.early_period is not None:
            if self._last_early is None:
                self._last_early = self._now
            elif self._now >= self._last_early + p.early_period:
                self._emit_early()
                self._last_early = self._now

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist changed sessions and the checkpoint atomically; expire; evict.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        them (changelog) and commits them itself. Memory already reflects them, so if
        the caller cannot commit it must discard this operator and reopen.
        """
        batch = StoreBatch()
        if self.by_offsets:
            ended = self._ended_tuple_sessions()
            self._persist(batch)
            self._drop(batch, ended)
        else:
            superseded = self._persist(batch)
            self._expire(batch, superseded)
        self.batches += 1
        batch.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, self._checkpoint_bytes())
        if commit:
            self.store.commit(batch)
        if not self.by_offsets:
            self._evict_closed()
        return batch

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        if self.store.closed:
            return
        self.flush()
        self.store.close()

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored sessions of ``key`` overlapping ``[start, end)``, in start order.

        Bounds are event times for time sessions and offsets for tuple sessions (then
        the sessions of every partition holding the key are returned).
        """
        prefix = SESSION_TAG + encode_str(key)
        if self.by_offsets:
            lo, hi = prefix, prefix_upper_bound(prefix)
        else:
            lo, hi = prefix + MIN_I64_BYTES, prefix + encode_i64(clamp_i64(end))
        found = [(k, v) for k, v in self.store.scan(ColumnFamily.WINDOW_META, lo, hi)]
        if found:
            self._load(self.codec.decode([k for k, _ in found], [v for _, v in found]), self._known)
        slots = [
            s
            for s in self.slots.live().tolist()
            if self.keys.name[int(self.slots.kid[s])] == key
            and int(self.slots.start[s]) < end
            and int(self.slots.last[s]) + self._pad > start
        ]
        if not slots:
            return []
        slots.sort(
            key=lambda s: (int(self.slots.start[s]), int(self.keys.part_arr[self.slots.kid[s]]))
        )
        sl = np.asarray(slots, dtype=np.int64)
        values = self.aggs.finish(self.slots.acc[sl], self._objs_of(sl))
        names = list(values)
        return [
            StoredWindow(
                key=key,
                window_start=int(self.slots.start[s]),
                window_end=int(self.slots.last[s]) + self._pad,
                values={n: values[n][j] for n in names},
                fired=bool(self.slots.closed[s]),
            )
            for j, s in enumerate(slots)
        ]
