"""The join operator of one task: takes both inputs' messages, joins them on arrival,
emits matches and outer-join rows, and persists state and checkpoint per flush.

The parts: :class:`~window_operator.kernel.OperatorKernel` (positions, the clock over
both inputs, outputs, checkpoint), :class:`TimeMatcher` (caches and probes of time
joins), :class:`RowsWindows` (rows joins), :class:`OuterRows` (outer-join state),
:class:`JoinStorage` (staged messages, window metadata, expiry), :class:`JoinEmitter`
(result batches) and :class:`JoinQueries` (the seed's query API).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from stores.keys import MIN_I64
from stores.rocks import StoreBatch, TaskStore
from window_operator.arrays import IntArray
from window_operator.columns import check_column_lengths, check_column_values, position_columns
from window_operator.config import DEFAULT_CACHE_MB
from window_operator.errors import InvalidArgumentError
from window_operator.join.common import (
    LEFT,
    MAX_OFFSET,
    MAX_PARTITION,
    POSITION_BITS,
    RIGHT,
    JoinKey,
    UnknownSourceError,
    obj_array,
)
from window_operator.join.decoding import JoinDecoder, JoinRows, check_join_keys
from window_operator.join.emission import JoinEmitter
from window_operator.join.keys import JoinKeyTable
from window_operator.join.matching import TimeMatcher
from window_operator.join.outer import OuterRows
from window_operator.join.queries import JoinQueries
from window_operator.join.reads import MessageReader
from window_operator.join.results import (
    JoinKind,
    JoinMessage,
    JoinResult,
    JoinResultBatch,
    JoinWindow,
)
from window_operator.join.rows import RowsWindows
from window_operator.join.spec import JoinSpec
from window_operator.join.state import MessageCodec
from window_operator.join.storage import JoinStorage
from window_operator.kernel import ClockState, LiveState, OperatorKernel, StepStats
from window_operator.kernel.checkpoint import JsonValue
from window_operator.kernel.positions import check_record_position, check_source
from window_operator.kernel.shell import KernelForwarding, changes, queries, query_bounds, timer
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode, ErrorRecord

if TYPE_CHECKING:
    from window_operator.kernel import WindowOperator

__all__ = [
    "DEFAULT_CACHE_MAX_ROWS",
    "DEFAULT_CACHE_MB",
    "DEFAULT_CACHE_SLACK_MS",
    "DEFAULT_KEY_LIMIT",
    "JoinOperator",
]

#: Messages this far behind the cache's target horizon are still kept in memory.
DEFAULT_CACHE_SLACK_MS = 60_000
#: At most this many messages per input stay in memory after a flush.
DEFAULT_CACHE_MAX_ROWS = 2_000_000
#: Interned join keys kept before unused ones are forgotten (at a flush).
DEFAULT_KEY_LIMIT = 100_000

_UNMATCHED = (JoinKind.LEFT_UNMATCHED, JoinKind.RIGHT_UNMATCHED)


class JoinOperator(KernelForwarding[JoinResultBatch, JoinResult]):
    """A task's windowed join of two inputs over one RocksDB store.

    :meth:`add_batch` takes decoded :class:`JoinRows` of one input (the typed protocol
    entry point); :meth:`add_records` / :meth:`add_message` take records (dicts) of an
    input named by ``join.<side>.name``. Results accumulate until
    :meth:`take_result_batches` / :meth:`get_result`, rejected records until
    :meth:`get_errors`. :meth:`flush` writes new messages, window metadata, outer-join
    state, expiry and the checkpoint (offsets, watermark) in one WriteBatch. Opening an
    operator over an existing store restores it.

    ``cache_slack_ms`` / ``cache_max_rows`` / ``cache_mb`` bound the in-memory message
    caches (how far behind the watermark's reach they keep messages, how many per
    input, and their estimated size in MiB: ``state.cache_mb``); ``key_limit`` is how
    many join keys stay interned before the ones nothing in memory refers to are
    forgotten. They change speed and memory, never results.
    """

    def __init__(
        self,
        spec: JoinSpec,
        store: TaskStore,
        *,
        decoders: tuple[JoinDecoder, JoinDecoder] | None = None,
        cache_slack_ms: int = DEFAULT_CACHE_SLACK_MS,
        cache_max_rows: int = DEFAULT_CACHE_MAX_ROWS,
        cache_mb: int = DEFAULT_CACHE_MB,
        key_limit: int = DEFAULT_KEY_LIMIT,
    ) -> None:
        if min(cache_slack_ms, cache_max_rows, cache_mb, key_limit) < 0:
            raise ValueError("cache_slack_ms, cache_max_rows, cache_mb and key_limit must be >= 0")
        self.spec = spec
        self.decoders = decoders
        self.kernel: OperatorKernel[JoinResultBatch] = OperatorKernel(
            store, shape=spec.shape, policy=spec.policy, sources=2, inputs=spec.inputs
        )
        self.keys = JoinKeyTable(spec.on)
        codecs = (MessageCodec(spec.layout, LEFT), MessageCodec(spec.layout, RIGHT))
        reader = MessageReader(store, codecs, self.keys)
        limits = dict(slack_ms=cache_slack_ms, max_rows=cache_max_rows, max_bytes=cache_mb << 20)
        self.matcher = TimeMatcher(spec, self.keys, reader, **limits)
        self.storage = JoinStorage(spec, codecs)
        self.outer = (OuterRows(LEFT, spec), OuterRows(RIGHT, spec))
        self.rows = RowsWindows(codecs)
        self.emitter = JoinEmitter(self.keys, self.kernel.outputs)
        self.queries = JoinQueries(
            spec, self.keys, reader, self.matcher.caches, self.rows, self.storage
        )
        self.key_limit = key_limit
        self._key_limit = key_limit
        self._topics = (spec.left_topic or spec.left, spec.right_topic or spec.right)
        #: Arrival sequence numbers of rows joins (checkpointed).
        self._seq = 0
        self._restore()

    # ------------------------------------------------------------------ properties

    def side_of(self, source: str) -> int:
        """The index of an input by name (:data:`LEFT` or :data:`RIGHT`)."""
        if source == self.spec.left:
            return LEFT
        if source == self.spec.right:
            return RIGHT
        raise UnknownSourceError(
            f"unknown source {source!r}: expected {self.spec.left!r} or {self.spec.right!r}"
        )

    # ------------------------------------------------------------------ input

    @changes
    def add_batch(self, rows: JoinRows) -> StepStats:
        """Add decoded messages of input ``rows.source``.

        Replays (an offset not above the last applied one of its partition) are no-ops.
        Retention is decided with the watermark as it stood before the batch.
        """
        side = rows.source
        if side not in (LEFT, RIGHT):
            raise UnknownSourceError(f"unknown source index {side}: a join has inputs 0 and 1")
        if not len(rows):
            return StepStats()
        part, ts = rows.partition, rows.ts
        if int(part.min()) < 0 or int(part.max()) > MAX_PARTITION:
            raise InvalidArgumentError(f"partitions must be in [0, {MAX_PARTITION}]")
        if not rows.keys_checked:  # rows of from_columns: the library's caller's keys
            check_join_keys(rows.keys, len(self.spec.on))
            rows.keys_checked = True
        kernel = self.kernel
        adm = kernel.admit(side, part, rows.offset)
        off, fresh = adm.offsets, adm.fresh
        if int(off.max()) > MAX_OFFSET:
            raise InvalidArgumentError(f"offsets must be at most {MAX_OFFSET}")
        wm_before = self.watermark
        accept = fresh.copy()
        if wm_before > NO_WATERMARK:
            too_old = fresh & (ts + self.spec.retention < wm_before)
            for i in np.flatnonzero(too_old).tolist():
                self._reject_retention(rows, i, int(off[i]), wm_before)
            accept &= ~too_old
        idx = np.flatnonzero(accept)
        matches = late = 0
        if len(idx):
            pos = (part << POSITION_BITS) | off
            if self.spec.rows is None:
                matches = self._apply_time(side, rows, idx, pos)
            else:
                matches = self._apply_rows(side, rows, idx, pos, wm_before)
            late = int((ts[idx] < wm_before).sum())
            kernel.clock.observe(side, part[idx], ts[idx])
        kernel.positions.advance(side, part[fresh], off[fresh])
        if rows.wall_ms is not None and fresh.any():
            wall = np.where(rows.wall_ms < 0, ts, rows.wall_ms)
            kernel.clock.note_wall(side, part[fresh], wall[fresh])
        if not kernel.holding:
            self._advance_watermark(kernel.clock.coalesced())
        rejected = int(fresh.sum()) - len(idx)
        return StepStats(len(idx), adm.replayed, rejected, late, matches)

    @changes
    def add_records(
        self,
        source: str,
        records: Sequence[Mapping[str, Any]],
        *,
        partitions: Sequence[int] | IntArray | None = None,
        offsets: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
        partition: int = 0,
    ) -> StepStats:
        """Add records (dicts) of the input named ``source``, decoded with its decoder.

        ``partitions`` / ``offsets`` (``-1``: next) / ``wall_ms`` give each record's
        metadata (default: ``partition``, the next offsets, no wall clock; ``wall_ms`` is
        the arrival time, which stands for the Kafka timestamp: the event time of an
        input with ``timestamp_from: kafka``). Records that do not decode become error
        records (once: their offsets count as handled).
        """
        side = self.side_of(source)
        if self.decoders is None:
            raise InvalidArgumentError("records need decoders (build the operator from a job)")
        n = len(records)
        part, off, walls = position_columns(
            n,
            partition if partitions is None else partitions,
            offsets,
            wall_ms,
            names=("partitions", "offsets"),
        )
        lengths = [("partitions", len(part)), ("offsets", len(off))]
        check_column_lengths(n, lengths + ([] if walls is None else [("wall_ms", len(walls))]))
        check_column_values(np.zeros(0, np.int64), part, off)  # before any change
        if len(part) and int(part.max()) > MAX_PARTITION:
            raise InvalidArgumentError(f"partitions must be in [0, {MAX_PARTITION}]")
        if len(off) and int(off.max()) > MAX_OFFSET:
            raise InvalidArgumentError(f"offsets must be at most {MAX_OFFSET}")
        adm = self.kernel.admit(side, part, off)
        idx = np.flatnonzero(adm.fresh)
        il = idx.tolist()
        wall = None if walls is None else walls[idx]
        decoded = self.decoders[side].decode_records(
            records if len(il) == n else [records[i] for i in il],
            partitions=part[idx],
            offsets=adm.offsets[idx],
            wall_ms=wall,
            record_times=wall,  # the arrival times stand for the Kafka timestamps
        )
        stats = self.add_batch(decoded.rows)
        # Rejected records were handled: a replay must not reject them again.
        for err in decoded.errors:
            assert err.partition is not None and err.offset is not None
            self.mark_consumed(err.partition, err.offset, source=side)
            self.kernel.outputs.reject(err)
        return stats + StepStats(replayed=adm.replayed, rejected=len(decoded.errors))

    @changes
    def add_message(
        self,
        source: str,
        record: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> StepStats:
        """Add one record of the input named ``source`` (``wall_ms``: its arrival time,
        which stands for its Kafka timestamp, as in ``simulate``)."""
        partition, offset, wall_ms = check_record_position(partition, offset, wall_ms)
        side = self.side_of(source)
        decoder = None if self.decoders is None else self.decoders[side]
        got = self.kernel.decode_one(
            decoder,
            record,
            source=side,
            partition=partition,
            offset=offset,
            topic=self._topics[side],
            record_time=wall_ms,
        )
        if isinstance(got, StepStats):
            return got
        return self.add_batch(JoinRows.one(side, got.value, partition, got.offset, wall_ms))

    @changes
    def mark_consumed(self, partition: int, offset: int, *, source: int = 0) -> None:
        """Record that ``offset`` of input ``source``'s ``partition`` was handled outside."""
        partition, _, _ = check_record_position(partition, offset, next_offset=False)
        source, offset = check_source(source, 2), int(offset)  # an integer: checked
        self.kernel.positions.mark(source, partition, offset)

    # ------------------------------------------------------------------ time and output

    @changes
    def adopt_clock(self, state: ClockState) -> None:
        """Take the clock of the whole job (Spark driver); emit what its watermark proves."""
        clock = self.kernel.clock
        clock.adopt(state)
        # the job's watermark, or the one its clock implies where that is further
        self._advance_watermark(max(state.watermark, clock.coalesced()))

    @timer
    def timeout(self, now_ms: int) -> None:
        """Advance the wall clock; :data:`END_OF_TIME` ends both inputs."""
        clock = self.kernel.clock
        if clock.tick(now_ms):
            self._advance_watermark(END_OF_TIME)
            return
        if self.spec.idle_timeout is not None:
            self._advance_watermark(clock.coalesced())

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint atomically; expire and evict; return the writes.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        and commits them itself. Memory already reflects them, so if the caller cannot
        commit it must discard this operator and reopen the store.
        """
        with self.kernel.flushing():
            batch = StoreBatch()
            encoded = self.keys.encoded
            self.storage.write_messages(batch, encoded)
            for outer in self.outer:
                outer.write(batch, encoded)
            self.storage.write_meta(batch)
            wm = self.watermark
            if NO_WATERMARK < wm < END_OF_TIME:
                for side in (LEFT, RIGHT):
                    self._expire(side, wm, batch)
            # after the puts: a left row trimmed from a rows window may be staged in them
            self.rows.write(batch)
            fields = {**self.storage.to_json(), "seq": self._seq, "rows_swept": self.rows.swept}
            self.kernel.write_checkpoint(batch, fields)
            self.kernel.commit(batch, commit=commit)
            self.matcher.evict(wm)
            if len(self.keys) > self._key_limit:
                self._compact_keys()
            return batch

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        self.kernel.close(self.flush)

    # ------------------------------------------------------------------ queries

    def live_state(self) -> LiveState:
        """The messages each input holds in the Message Store, counted by window frame
        (:meth:`~window_operator.join.meta.WindowFrames.held`); live keys and windows
        are not told (``-1``)."""
        frames, expired = self.storage.frames, self.storage.expired
        held = {name: frames.held(side, expired[side]) for side, name in enumerate(self.spec.names)}
        return LiveState(keys=-1, windows=-1, messages=held)

    @queries
    def get_windows(self, key: JoinKey | None, start: int, end: int) -> list[JoinWindow]:
        """Windows of both inputs overlapping ``[start, end)``, by start then input.

        ``key`` ``None``: the frames' metadata of every key (Window Meta Store); a join
        key: the same frames restricted to that key's messages (Message Store).
        """
        return self.queries.windows(key, *query_bounds(start=start, end=end))

    @queries
    def get_messages(
        self,
        source: str,
        start_ts: int,
        start_offset: int,
        end_ts: int,
        end_offset: int,
        join_keys: Sequence[JoinKey] | None = None,
    ) -> list[JoinMessage]:
        """Stored messages of the input named ``source`` with ``(ts, position)`` in
        ``[(start_ts, start_offset), (end_ts, end_offset)]`` (positions:
        :func:`~window_operator.join.common.message_position`), optionally only those
        of ``join_keys``.

        Unkeyed results are in ``(ts, position)`` order, keyed ones by key (in the given
        order) then ``(ts, position)``. Messages expire at a flush: until then those past
        retention are still returned (they match nothing).
        """
        ts0, off0, ts1, off1 = query_bounds(start_ts=start_ts, start_offset=start_offset,
                                            end_ts=end_ts, end_offset=end_offset)  # fmt: skip
        return self.queries.messages(self.side_of(source), (ts0, off0), (ts1, off1), join_keys)

    # ------------------------------------------------------------------ batch path

    def _apply_time(self, side: int, rows: JoinRows, idx: IntArray, pos_all: IntArray) -> int:
        """Join accepted messages against the other input, then store them."""
        il = idx.tolist()
        full = len(idx) == len(rows)
        kids = self.keys.ids_of(rows.keys if full else [rows.keys[i] for i in il])
        ts = rows.ts if full else rows.ts[idx]
        pos = pos_all if full else pos_all[idx]
        rec = obj_array(rows.records if full else [rows.records[i] for i in il])
        found = self.matcher.partners(side, kids, ts)
        other = 1 - side
        if self.spec.outer(other) and len(found.pos):
            retracted = self.outer[other].matched(found.pos)
            if retracted:
                self.emitter.rows(JoinKind.RETRACT, other, retracted)
        if len(found.probe):
            self.emitter.matches(side, kids, ts, pos, rec, found)
        self.matcher.insert(side, kids, ts, pos, rec)
        self.storage.stage(side, kids, ts, pos, rec.tolist(), None, self.keys.encoded)
        if self.spec.outer(side):
            matched = np.zeros(len(kids), dtype=np.bool_)
            matched[found.probe] = True
            self.outer[side].register(kids, ts, pos, rec, ~matched)
        return len(found.probe)

    def _apply_rows(
        self, side: int, rows: JoinRows, idx: IntArray, pos_all: IntArray, wm_before: int
    ) -> int:
        """ROWS n PRECEDING: right joins the n latest lefts of its key; left joins all rights."""
        n_rows = self.spec.rows
        assert n_rows is not None
        il = idx.tolist()
        kids = self.keys.ids_of([rows.keys[i] for i in il])
        ts, pos = rows.ts[idx], pos_all[idx]
        recs = [rows.records[i] for i in il]
        seqs = np.arange(self._seq + 1, self._seq + 1 + len(il), dtype=np.int64)
        self._seq += len(il)
        # Partners older than retention are invisible however the deletes were timed.
        floor = wm_before - self.spec.retention if wm_before > NO_WATERMARK else MIN_I64
        encoded = self.keys.encoded
        found = self.rows.add(side, n_rows, floor, kids, ts, pos, recs, seqs, encoded)
        self.storage.stage(side, kids, ts, pos, recs, seqs, encoded)
        if len(found.probe):
            self.emitter.matches(side, kids, ts, pos, obj_array(recs), found)
        return len(found.probe)

    def _reject_retention(self, rows: JoinRows, i: int, offset: int, wm: int) -> None:
        ts = int(rows.ts[i])
        self.kernel.outputs.reject(
            ErrorRecord(
                code=ErrorCode.OUT_OF_RETENTION,
                reason=(
                    f"event time {ts} of {self.spec.names[rows.source]!r} is out of retention: "
                    f"more than {self.spec.retention} ms behind the watermark {wm}"
                ),
                partition=int(rows.partition[i]),
                offset=offset,
                raw=rows.records[i],
                topic=self._topics[rows.source],
                source=self.spec.names[rows.source],
            )
        )

    # ------------------------------------------------------------------ state

    def _advance_watermark(self, candidate: int) -> None:
        self.kernel.clock.advance(candidate)
        if self.spec.kind == "inner":
            return
        # also rows that arrived already past their deadline (late and unmatched)
        wm = self.watermark
        for side in (LEFT, RIGHT):
            if self.spec.outer(side):
                due = self.outer[side].due(wm)
                if due:
                    self.emitter.rows(_UNMATCHED[side], side, due)

    def _expire(self, side: int, wm: int, batch: StoreBatch) -> None:
        """Delete what the watermark proves can no longer match (see the package doc)."""
        cut = self.spec.cutoff(side, wm)
        if not self.storage.expire(side, cut, batch):
            return
        if self.spec.rows is not None:
            self.rows.expire(side, cut, self.spec.sweep_ms, self.keys.encoded)
        if self.spec.outer(side):
            self.outer[side].expire(cut, batch)

    def _compact_keys(self) -> None:
        """Forget join keys that nothing in memory refers to any more."""
        live_parts = self.matcher.live_kids() + self.rows.live_kids()
        live_parts += [o.live_kids() for o in self.outer]
        remap = self.keys.compact(np.unique(np.concatenate(live_parts)))
        self.matcher.remap(remap)
        for o in self.outer:
            o.remap(remap)
        self.rows.remap(remap)
        # interned keys grow back to twice the live ones before the next compaction
        self._key_limit = max(self.key_limit, 2 * len(self.keys))

    def _restore_fields(self, fields: dict[str, JsonValue]) -> None:
        self._seq = int(fields["seq"])
        self.rows.swept = [int(t) for t in fields["rows_swept"]]
        self.storage.restore(self.store, fields)
        for side in (LEFT, RIGHT):
            top = self.storage.stored_max[side]
            # The cache starts empty: complete only above everything stored.
            self.matcher.caches[side].horizon = MIN_I64 if top is None else top + 1
            self.outer[side].restore(self.store, self.keys)
            if self.spec.rows is not None:
                self.rows.restore(side, self.store, self.keys)


if TYPE_CHECKING:

    def _conforms(op: JoinOperator) -> WindowOperator[JoinRows, JoinResultBatch, JoinWindow]:
        return op
