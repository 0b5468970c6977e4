"""The windowed aggregator: the seed's procedure over frames, for one task.

Per call (a batch, or a single message as a batch of one):

1. replays (offset <= last applied offset of the partition) are no-ops;
2. with the watermark as it stood *before* the call, events whose newest window is
   past retention go to the error output, the rest are accepted;
3. accepted events are pre-aggregated per (key, frame) and merged into the frames;
4. windows that had already fired and now changed are marked late (re-emitted per
   arrival or batched per period);
5. the watermark advances and every window whose end it passed fires ON_TIME.

Timers (:meth:`WindowedAggregator.timeout`) run the wall-clock policies: batched LATE
results, EARLY results of open windows, and idle partitions that stop holding the
watermark back. :meth:`WindowedAggregator.flush` writes dirty frames, window
bookkeeping and the checkpoint in one WriteBatch, expires state past retention by
range delete and evicts closed frames from memory.

The parts: :class:`~window_operator.kernel.OperatorKernel` (positions, clock, outputs,
checkpoint), :class:`FrameStore` (every write to frame state), :class:`WindowBook`
(update sequence numbers, pending LATE updates), :class:`TimeTrigger` (which windows
fire, are late, expire) and :class:`WindowEvaluator` (window values from frames).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet
from window_operator.arrays import FloatArray, IntArray, present_ids
from window_operator.config import DEFAULT_CACHE_MB
from window_operator.events import DecodedEvent, EventBatch, RecordDecoder
from window_operator.kernel import (
    LiveState,
    OperatorKernel,
    StepStats,
    StoredWindow,
    TimerAction,
)
from window_operator.kernel.checkpoint import JsonValue
from window_operator.kernel.kernel import Decoded
from window_operator.kernel.shell import EventOperator, changes, queries, query_bounds, timer
from window_operator.keytable import KeyTable
from window_operator.policies import END_OF_TIME, NO_WATERMARK, EmitPolicy, LateMode
from window_operator.results import ResultBatch
from window_operator.timewindows.bookkeeping import WindowBook
from window_operator.timewindows.emission import WindowEmitter
from window_operator.timewindows.evaluator import WindowEvaluator
from window_operator.timewindows.frame_store import FrameStore
from window_operator.timewindows.grouping import group_by_key_frame
from window_operator.timewindows.spilled import spilled_frames
from window_operator.timewindows.state import FRAMES
from window_operator.timewindows.trigger import TimeTrigger
from window_operator.windows import TimeWindowing

__all__ = ["KEY_SLACK", "WindowedAggregator"]

#: Keys interned beyond twice the live ones before the key table is compacted (its
#: cost is then amortized over the keys released).
KEY_SLACK = 4096


class WindowedAggregator(EventOperator):
    """A task's tumbling / hopping window aggregation over RocksDB."""

    def __init__(
        self,
        *,
        windowing: TimeWindowing,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        decoder: RecordDecoder | None = None,
        use_deduct: bool | None = None,
        key_slack: int = KEY_SLACK,
        cache_mb: int = DEFAULT_CACHE_MB,
        inputs: Sequence[str] = (),
    ) -> None:
        aggregations.check_deduct(use_deduct)
        self.windowing = windowing
        self.aggs = aggregations
        self.policy = policy
        self.decoder = decoder
        self.use_deduct = aggregations.deductible if use_deduct is None else use_deduct
        window = {"type": "time", "size": windowing.size, "step": windowing.step}
        shape = aggregations.state_shape(window)
        self.kernel: OperatorKernel[ResultBatch] = OperatorKernel(
            store, shape=shape, policy=policy, timed=True, inputs=inputs
        )
        self.keys: KeyTable[str] = KeyTable()
        self.frames = FrameStore(
            aggregations,
            store,
            self.keys,
            windowing.step,
            max_bytes=cache_mb << 20,
            early=policy.early_period is not None,
        )
        self.book = WindowBook(store, self.keys)
        self.trigger = TimeTrigger(windowing, policy.retention)
        self.evaluator = WindowEvaluator(
            self.frames, aggregations, windowing.size, windowing.step, self.use_deduct
        )
        self.emitter = WindowEmitter(
            keys=self.keys,
            aggs=aggregations,
            policy=policy,
            frames=self.frames,
            book=self.book,
            trigger=self.trigger,
            evaluator=self.evaluator,
            outputs=self.kernel.outputs,
            timers=self.kernel.timers,
        )
        self.key_slack = key_slack
        self._expired_upto: int | None = None
        self._size = windowing.size
        self._step = windowing.step
        self._restore()

    # ------------------------------------------------------------------ properties

    def live_state(self, first_start: int | None = None) -> LiveState:
        """Keys with a window that has not fired yet, and those windows (read-only);
        ``first_start``: count only windows starting there or later.

        Open frames are in memory (restored ones too), except those spilled beyond the
        memory budget: their range of the store is read (keys only).
        """
        fs = self.frames
        held = fs.kid >= 0
        k = self._size // self._step
        frames, kids = fs.frame[held], fs.kid[held]
        stored_kids, stored_frames = spilled_frames(fs, self.watermark - self._size + 1)
        if len(stored_frames):
            frames = np.concatenate([frames, stored_frames])
            kids = np.concatenate([kids, stored_kids])
        if not len(frames):
            return LiveState(keys=0, windows=0)
        back = np.arange(k, dtype=np.int64) * self._step
        starts = (frames[:, None] - back[None, :]).ravel()
        owners = np.repeat(kids, k)
        # a window fires once the watermark reaches its end
        is_open = starts > self.watermark - self._size
        if first_start is not None:
            is_open &= starts >= first_start
        # a window (key, start) as one integer, its start counted in steps from the oldest
        base = int(frames.min()) - (k - 1) * self._step
        span = (int(frames.max()) - base) // self._step + 1
        codes = owners[is_open] * span + (starts[is_open] - base) // self._step
        windows = np.unique(codes)
        return LiveState(keys=len(np.unique(windows // span)), windows=len(windows))

    # ------------------------------------------------------------------ public API

    @changes
    def add_batch(self, batch: EventBatch | Sequence[Mapping[str, Any]]) -> StepStats:
        """Add many messages at once (columns, or records decoded with the job's decoder).

        Lateness and retention are decided with the watermark as it stood before the
        batch, so a replayed batch decides exactly the same way; the stored state and
        the final result of every window equal those of adding the messages one by one.
        """
        if isinstance(batch, EventBatch):
            self.aggs.check_batch(batch)
            return self._add_columns(batch)
        records = list(batch)
        decoder = self._records_decoder(records)
        # every record takes the next offset of partition 0, rejected ones too,
        # exactly as add_message does one at a time
        first = self.kernel.positions.get(0, 0) + 1
        offsets = list(range(first, first + len(records)))
        decoded = decoder.decode_records(records, offsets=offsets)
        self.kernel.outputs.errors.extend(decoded.errors)
        stats = self._add_columns(decoded.batch)
        if offsets:
            self.mark_consumed(0, offsets[-1])
        return stats + StepStats(rejected=len(decoded.errors))

    def observe(self, partition: int, ts: int) -> None:
        """``partition`` reached event time ``ts`` without an event here (the offsets
        engine: a record handled outside); the windows the watermark then passes fire,
        unless a batch holds the watermark."""
        self.kernel.clock.observe_one(0, partition, ts)
        if not self.kernel.holding:
            self._advance_watermark(self.kernel.clock.coalesced())

    @timer
    def timeout(self, now_ms: int) -> None:
        """Run the wall-clock policies at ``now_ms``; :data:`END_OF_TIME` fires everything."""
        clock = self.kernel.clock
        if clock.tick(now_ms):
            self._advance_watermark(END_OF_TIME)
            self._emit_late()
            return
        if self.policy.idle_timeout is not None and clock.max_ts:
            self._advance_watermark(clock.coalesced())
        action = self.kernel.timers_due(bool(self.book.pending))
        if TimerAction.LATE in action:
            self._emit_late()
        if TimerAction.EARLY in action:
            open_ = self.trigger.open_windows(self.watermark)
            self.frames.load_early(open_.lo, self._size)
            self.emitter.early(self.watermark)

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint atomically; expire and evict; return the writes.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        them (changelog) and commits them itself. Memory then already reflects them,
        so if the caller cannot commit it must discard this aggregator and reopen.
        """
        with self.kernel.flushing():
            batch = StoreBatch()
            wm = self.watermark
            cutoff = self.trigger.expiry_cutoff(wm)
            if cutoff is not None and self.book.pending_upto(cutoff):
                self._emit_late(only_upto=cutoff)
            spilled = self.frames.select_spill(self.trigger.evictable_before(wm))
            self.frames.persist(batch)
            self.book.persist(batch)
            if cutoff is not None and (self._expired_upto is None or cutoff > self._expired_upto):
                self.frames.expire(batch, cutoff, self._expired_upto)
                self.book.expire(batch, cutoff)
                self._expired_upto = cutoff
            self.kernel.write_checkpoint(batch, {"expired_upto": self._expired_upto})
            self.kernel.commit(batch, commit=commit)
            # Frames whose every window has fired are in the store now; keep memory small.
            if wm > NO_WATERMARK:
                self.frames.evict_closed(self.trigger.evictable_before(wm))
                self.book.evict(wm, self._size)
            self.frames.release_many(spilled)  # beyond the memory budget, written above
            self._release_keys()
            return batch

    def _release_keys(self) -> None:
        """Forget keys nothing in memory refers to (their state, if any, is in the store)."""
        if len(self.keys) <= self.key_slack:
            return  # within the slack whatever is live: no need to count
        live = present_ids([self.frames.live_kids(), self.book.live_kids()], len(self.keys))
        if len(self.keys) <= 2 * len(live) + self.key_slack:
            return
        remap = self.keys.compact(live)
        self.frames.renumber_keys(remap)
        self.book.renumber_keys(remap)

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        self.kernel.close(self.flush)

    @queries
    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` that overlap ``[start, end)``, in start order."""
        self._check_key(key)
        start, end = query_bounds(start=start, end=end)
        kid = self.keys.id_of(key)
        # Windows are derived from the key's frames (a window exists iff it holds one):
        # the frames of the range are found by a time-range scan of the store (keys are
        # time-first) plus the cached ones, so the cost follows the state, not the range.
        # a window [w, w + size) overlaps [start, end) iff start - size < w < end, and
        # holds the frames w .. w + size - step
        f_lo = self.windowing.floor(max(start, NO_WATERMARK) - self._size + 1)
        f_hi = min(end + self._size - self._step, END_OF_TIME)
        frames = {f for (k, f) in self.frames.slot_of if k == kid and f_lo <= f < f_hi}
        enc = self.keys.encoded[kid]
        for k, _ in self.store.scan_range(FRAMES.times(f_lo, f_hi)):
            if FRAMES.holds_key(k, enc):
                frames.add(FRAMES.time_of(k))
        wins = sorted(
            {
                w
                for f in frames
                for w in range(f - self._size + self._step, f + 1, self._step)
                if w + self._size > start and w < end
            }
        )
        if not wins:
            return []
        acc, objs, exists = self.evaluator.gather([(kid, w) for w in wins])
        idx = [i for i, e in enumerate(exists) if e]
        if not idx:
            return []
        values = self.aggs.finish(acc[idx], [objs[i] for i in idx] if objs else None)
        wm = self.watermark
        return [
            StoredWindow(
                key=key,
                window_start=wins[i],
                window_end=wins[i] + self._size,
                values={n: col[j] for n, col in values.items()},
                fired=wins[i] + self._size <= wm,
            )
            for j, i in enumerate(idx)
        ]

    # ------------------------------------------------------------------ batch path

    def _add_columns(self, batch: EventBatch) -> StepStats:
        if not len(batch):
            return StepStats()
        wm_before = self.watermark
        adm = self.kernel.admit_events(batch)
        off, fresh = adm.offsets, adm.fresh
        frames = self.windowing.frames_of(batch.ts)
        accept = fresh.copy()
        rejected = 0
        if wm_before > NO_WATERMARK:
            retained = self.trigger.retained(frames, wm_before)
            too_old = fresh & ~retained
            if too_old.any():
                for i in np.flatnonzero(too_old).tolist():
                    self._reject_retention(
                        int(batch.ts[i]), batch.keys[i], int(batch.partition[i]), int(off[i])
                    )
                rejected = int(too_old.sum())
                accept &= retained
        idx = np.flatnonzero(accept)
        late = 0
        if len(idx):
            late = self._apply(batch, idx, frames[idx], off, wm_before)
        self.kernel.applied_events(batch, adm, idx)
        if not self.kernel.holding:
            self._advance_watermark(self.kernel.clock.coalesced())
        if self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=len(idx), replayed=adm.replayed, rejected=rejected, late=late)

    def _apply(
        self, batch: EventBatch, idx: IntArray, frames: IntArray, off: IntArray, wm_before: int
    ) -> int:
        keys = batch.keys
        full = len(idx) == len(keys)
        kids = self.keys.ids_of(keys if full else [keys[i] for i in idx.tolist()])
        ts = batch.ts[idx]
        g = group_by_key_frame(kids, frames, self._step)
        on_disk = g.frame + self._size <= wm_before
        slots, created = self.frames.resolve(g.kid, g.frame, on_disk)
        partial: FloatArray | None = None
        if self.aggs.width:
            numeric = batch.numeric if full else {f: v[idx] for f, v in batch.numeric.items()}
            partial = self.aggs.accumulate(numeric, ts, g.groups, len(g))
        if self.aggs.objects:
            self._accumulate_objects(batch, idx, g.groups, slots, off, kids)
        self.frames.merge(slots, partial)
        late_groups = np.flatnonzero(g.frame + self._step <= wm_before)
        if not len(late_groups):
            return 0
        created_pairs = {
            (int(g.kid[i]), int(g.frame[i])) for i in late_groups.tolist() if created[i]
        }
        for i in late_groups.tolist():
            self._mark_late(int(g.kid[i]), int(g.frame[i]), wm_before, created_pairs)
        return int(np.isin(g.groups, late_groups).sum())

    def _accumulate_objects(
        self,
        batch: EventBatch,
        idx: IntArray,
        groups: IntArray,
        slots: IntArray,
        off: IntArray,
        kids: IntArray,
    ) -> None:
        n = len(batch)
        cols = [
            [None] * n
            if f is None
            else batch.objects[f]
            if f in batch.objects
            else batch.numeric[f].tolist()
            for f in (agg.field for agg, _ in self.aggs.objects)
        ]
        ts_l, part_l, off_l = batch.ts.tolist(), batch.partition.tolist(), off.tolist()
        slot_l, kid_l, group_l = slots.tolist(), kids.tolist(), groups.tolist()
        for j, i in enumerate(idx.tolist()):
            self.frames.accumulate_objects(
                slot_l[group_l[j]],
                [_plain(col[i]) for col in cols],
                Ordering(ts_l[i], part_l[i], off_l[i]),
                kid_l[j],
            )

    # ------------------------------------------------------------------ single path

    def _add_decoded(self, got: Decoded[DecodedEvent], wall_ms: int | None) -> StepStats:
        """:meth:`_add_columns` for one fresh event, with scalars instead of arrays."""
        kernel = self.kernel
        event, pos, offset = got.value, got.position, got.offset
        key, ts, partition = event.key, event.ts, pos.partition
        wm_before = kernel.clock.watermark
        frame = self.windowing.frame_of(ts)
        kernel.positions.mark_at(pos, offset)
        if wall_ms is not None:
            kernel.clock.note_active(0, partition, wall_ms)
        if wm_before > NO_WATERMARK and not self.trigger.frame_retained(frame, wm_before):
            self._reject_retention(ts, key, partition, offset)
            self._advance_watermark(kernel.clock.coalesced())
            return StepStats(rejected=1)
        kid = self.keys.id_of(key)
        slot, created = self.frames.resolve_one(
            kid, frame, self.trigger.possibly_evicted(frame, wm_before)
        )
        if self.aggs.objects:
            values = [_field_value(event, agg.field) for agg, _ in self.aggs.objects]
            self.frames.accumulate_objects(slot, values, Ordering(ts, partition, offset), kid)
        self.frames.accumulate_one(slot, event.numeric, ts)
        late = 0
        if self.trigger.late(frame, wm_before):
            self._mark_late(kid, frame, wm_before, {(kid, frame)} if created else set())
            late = 1
        if ts > kernel.clock.max_ts.get(pos, NO_WATERMARK):
            kernel.clock.observe_one(0, partition, ts)
            self._advance_watermark(kernel.clock.coalesced())
        if late and self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return _APPLIED_LATE if late else _APPLIED

    # ------------------------------------------------------------------ emission

    def _advance_watermark(self, candidate: int) -> None:
        before = self.kernel.clock.advance(candidate)
        if before is None:
            return
        wm = self.watermark
        fired = self.trigger.on_time(before, wm)
        if fired is not None:
            self.frames.unspill(fired.lo, fired.hi + self._size - self._step)
        self.emitter.on_time(before, wm)
        # A window leaving retention sends its pending LATE update now: a later event
        # may change a frame it shares with younger windows, and must not count in it.
        cutoff = self.trigger.expiry_cutoff(wm)
        if cutoff is not None and self.book.pending_upto(cutoff):
            self._emit_late(only_upto=cutoff)

    def _emit_late(self, only_upto: int | None = None) -> None:
        self.emitter.late(only_upto)

    def _mark_late(
        self, kid: int, frame: int, wm_before: int, created: set[tuple[int, int]]
    ) -> None:
        self.emitter.mark_late(kid, frame, wm_before, created, self.kernel.clock.now)

    def _reject_retention(self, ts: int, key: str, partition: int, offset: int) -> None:
        self.kernel.reject_retention(ts, key, "its last window ended", partition, offset)

    # ------------------------------------------------------------------ restore

    def _restore_fields(self, fields: dict[str, JsonValue]) -> None:
        expired = fields.get("expired_upto")
        self._expired_upto = None if expired is None else int(expired)
        wm = self.watermark
        self.frames.load_range(wm - self._size + 1 if wm > NO_WATERMARK else -(2**63))
        self.book.restore(wm, self._size)


#: the stats of one event (shared: frozen, and building one per event costs)
_APPLIED = StepStats(applied=1)
_APPLIED_LATE = StepStats(applied=1, late=1)


def _field_value(event: DecodedEvent, field: str | None) -> Any:
    if field is None:
        return None
    if field in event.objects:
        return event.objects[field]
    return _plain(event.numeric.get(field))


def _plain(value: Any) -> Any:
    """NaN (the columnar null) back to None for object operations."""
    if isinstance(value, float) and value != value:
        return None
    return value
