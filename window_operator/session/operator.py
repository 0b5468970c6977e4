"""The session window operator: the kernel and the session parts, composed.

Per call (a batch; a single message takes a scalar path with the same semantics):

1. replays (offset <= last applied offset of the partition) are no-ops;
2. with the watermark as it stood *before* the call, events past retention go to the
   error output (time sessions only, :meth:`SessionTrigger.event_retained`);
3. accepted events are cut into the batch's own sessions, pre-aggregated, and merged
   with the retained sessions of the touched keys (:mod:`.merge`; stored ones are
   loaded first when they may touch);
4. sessions that changed after they closed are marked late; the watermark (or, for
   tuple sessions, the partition offset) advances and every session it closed fires.

The parts: :class:`~window_operator.kernel.OperatorKernel` (positions, clock, outputs,
checkpoint), :class:`SessionCache` (the sessions in memory), :class:`SessionStore`
(everything read from or written to RocksDB), the pure :mod:`.merge` and
:class:`SessionTrigger`, and :class:`SessionEmitter` (result batches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet
from window_operator.arrays import BoolArray, FloatArray, IntArray, one
from window_operator.config import DEFAULT_CACHE_MB, SessionWindow
from window_operator.events import DecodedEvent, EventBatch, RecordDecoder
from window_operator.kernel import (
    LiveState,
    OperatorKernel,
    StepStats,
    StoredWindow,
    TimerAction,
    WindowOperator,
)
from window_operator.kernel.checkpoint import JsonValue
from window_operator.kernel.kernel import Decoded
from window_operator.kernel.shell import EventOperator, changes, queries, query_bounds, timer
from window_operator.keytable import DEFAULT_KEY_SLACK
from window_operator.policies import END_OF_TIME, NO_WATERMARK, EmitPolicy, LateMode
from window_operator.results import Kind, ResultBatch
from window_operator.session.cache import SessionCache
from window_operator.session.emitter import SessionEmitter
from window_operator.session.loader import SessionLoader
from window_operator.session.merge import (
    BatchSessions,
    cut_batch,
    event_objects,
    event_values,
    merge,
    merge_one,
)
from window_operator.session.store import SessionStore
from window_operator.session.trigger import SessionTrigger

__all__ = ["SessionAggregator"]


class SessionAggregator(EventOperator):
    """A task's session window aggregation over RocksDB (time or tuple sessions).

    Satisfies :class:`~window_operator.kernel.WindowOperator` for
    ``EventBatch | Sequence[Mapping]`` input, :class:`ResultBatch` results and
    :class:`StoredWindow` queries. At a flush, keys with nothing in memory and nothing
    retained on disk are forgotten once there are more than twice the others plus
    ``key_slack``; open sessions beyond ``cache_mb`` (MiB) are spilled to the store.
    """

    def __init__(
        self,
        *,
        window: SessionWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        decoder: RecordDecoder | None = None,
        key_slack: int = DEFAULT_KEY_SLACK,
        cache_mb: int = DEFAULT_CACHE_MB,
        inputs: Sequence[str] = (),
    ) -> None:
        self.aggs = aggregations
        self.key_slack = key_slack
        self.policy = policy
        self.decoder = decoder
        self.by_offsets = window.max_idle_messages is not None
        if window.gap is not None:
            gap = int(window.gap)
            shape: dict[str, Any] = {"type": "session", "gap": gap}
        else:
            assert window.max_idle_messages is not None
            gap = int(window.max_idle_messages)
            shape = {"type": "tuple_session", "max_idle_messages": gap}
        self.gap = gap
        self.kernel: OperatorKernel[ResultBatch] = OperatorKernel(
            store,
            shape=aggregations.state_shape(shape),
            policy=policy,
            timed=True,
            inputs=inputs,
        )
        self.trigger = SessionTrigger(
            gap=gap, by_offsets=self.by_offsets, retention=policy.retention
        )
        self.cache = SessionCache(aggregations, per_partition=self.by_offsets)
        loader = SessionLoader(store, self.cache, self.trigger, self.kernel.clock)
        early = policy.early_period is not None
        self.sessions = SessionStore(loader, max_bytes=cache_mb << 20, early=early)
        self.emitter = SessionEmitter(self.cache, self.trigger, self.kernel.outputs)
        #: the input has ended (every open session fires, tuple sessions included)
        self._eot = False
        self._restore()

    # ------------------------------------------------------------------ properties

    def live_state(self) -> LiveState:
        """Keys with an open session, and those sessions (read-only). Open sessions are in
        memory, except those spilled beyond the memory budget: while some may be, the
        store's open ones are read too (index and record heads, nothing loaded)."""
        slots = self.cache.open_slots()
        kids = self.cache.slots.kid[slots]
        if not len(self.sessions.spilled):
            return LiveState(keys=len(np.unique(kids)), windows=len(slots))
        stored = self.sessions.loader.stored_only_open()
        enc = self.cache.keys.enc
        keys = {enc[k] for k in np.unique(kids).tolist()}.union(stored)
        return LiveState(keys=len(keys), windows=len(slots) + len(stored))

    # ------------------------------------------------------------------ public API

    @changes
    def add_batch(self, batch: EventBatch | Sequence[Mapping[str, Any]]) -> StepStats:
        """Add many messages at once (columns, or records decoded with the job's decoder).

        Retention is decided with the watermark as it stood before the batch, so a
        replayed batch decides the same way; after RETRACTs are applied, the final
        sessions and values equal those of adding the messages one by one.
        """
        if isinstance(batch, EventBatch):
            self.aggs.check_batch(batch)
            return self._add_columns(batch)
        records = list(batch)
        decoded = self._records_decoder(records).decode_records(records)
        self.kernel.outputs.errors.extend(decoded.errors)
        return self._add_columns(decoded.batch) + StepStats(rejected=len(decoded.errors))

    @timer
    def timeout(self, now_ms: int) -> None:
        """Run the wall-clock policies at ``now_ms``; :data:`END_OF_TIME` ends the input."""
        clock = self.kernel.clock
        if clock.tick(now_ms):
            self._eot = True
            self._advance_watermark(END_OF_TIME)
            if self.by_offsets:
                self._fire()
            self._emit_late()
            return
        if self.policy.idle_timeout is not None and clock.max_ts:
            self._advance_watermark(clock.coalesced())
        late_pending = self.policy.late_mode is LateMode.PERIOD and self.cache.any_pending()
        action = self.kernel.timers_due(late_pending)
        if TimerAction.LATE in action:
            self._emit_late()
        if TimerAction.EARLY in action:
            self._emit_early()

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist changed sessions and the checkpoint atomically; expire; evict.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        them (changelog) and commits them itself. Memory already reflects them, so if
        the caller cannot commit it must discard this operator and reopen.
        """
        with self.kernel.flushing():
            batch = StoreBatch()
            if self.by_offsets:
                ended = self.cache.take_ended()
                self.sessions.persist(batch)
                self.sessions.drop(batch, ended)
            else:
                superseded = self.sessions.persist(batch)
                self.sessions.expire(batch, superseded, self.watermark)
            self.kernel.write_checkpoint(batch, self.sessions.progress.to_json())
            self.kernel.commit(batch, commit=commit)
            if not self.by_offsets:
                self.sessions.evict_closed()
            self.sessions.release_keys(self.trigger.cutoff(self.watermark), self.key_slack)
            return batch

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        self.kernel.close(self.flush)

    @queries
    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored sessions of ``key`` overlapping ``[start, end)``, in start order.

        Bounds are event times for time sessions and offsets for tuple sessions (then
        the sessions of every partition holding the key are returned).
        """
        self._check_key(key)
        start, end = query_bounds(start=start, end=end)
        self.sessions.loader.key(key, end)
        return self.cache.windows(key, start, end, self.trigger.pad)

    # ------------------------------------------------------------------ batch path

    def _add_columns(self, batch: EventBatch) -> StepStats:
        n = len(batch)
        if n == 0:
            return StepStats()
        wm_before = self.watermark
        adm = self.kernel.admit_events(batch)
        part, off = batch.partition, adm.offsets
        idx = np.flatnonzero(adm.fresh)
        rejected = late = 0
        if len(idx):
            keys = batch.keys if len(idx) == n else [batch.keys[i] for i in idx.tolist()]
            kids = self.cache.keys.ids(keys, part[idx])
            axis = off[idx] if self.by_offsets else batch.ts[idx]
            if not self.by_offsets and wm_before > NO_WATERMARK:
                keep = self._retained(kids, axis, wm_before)
                if not keep.all():
                    for i in idx[~keep].tolist():
                        self._reject_retention(
                            int(batch.ts[i]), batch.keys[i], int(part[i]), int(off[i])
                        )
                    rejected = int((~keep).sum())
                    idx, kids, axis = idx[keep], kids[keep], axis[keep]
            if len(idx):
                late = self._apply(batch, idx, kids, axis, off, wm_before)
        self.kernel.applied_events(batch, adm, idx)
        self._after_step()
        if self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=len(idx), replayed=adm.replayed, rejected=rejected, late=late)

    def _retained(self, kids: IntArray, ts: IntArray, wm_before: int) -> BoolArray:
        """Events within retention (decided with the watermark before the call).

        Kept: events whose own interval closes within retention, and events inside the
        span of a retained session, which they join without moving its bounds (see
        :meth:`SessionTrigger.event_retained`). A session past retention takes part in
        nothing, whether or not the store still holds it, so decisions do not depend on
        when flushes ran.
        """
        trigger = self.trigger
        cutoff = trigger.cutoff(wm_before)
        keep = trigger.event_retained(ts, cutoff)
        cand = np.flatnonzero(~keep)
        if not len(cand):
            return keep
        c_kid, c_ts = kids[cand], ts[cand]
        self.sessions.loader.touching(c_kid, c_ts, c_ts, cutoff)
        sl = self.cache.slots
        slots = self.cache.of_keys(c_kid)
        slots = slots[trigger.retained(sl.last[slots], cutoff)]
        inside = trigger.inside(c_kid, c_ts, sl.kid[slots], sl.start[slots], sl.last[slots])
        keep[cand[inside]] = True
        return keep

    def _apply(
        self,
        batch: EventBatch,
        idx: IntArray,
        kids: IntArray,
        axis: IntArray,
        off: IntArray,
        wm_before: int,
    ) -> int:
        """Merge accepted events into sessions; return how many landed in closed ones."""
        aggs = self.aggs
        cut = cut_batch(kids, axis, self.gap)
        partial: FloatArray = np.empty((len(cut), aggs.width))
        if aggs.width:
            whole = len(idx) == len(batch)
            numeric = batch.numeric if whole else {f: v[idx] for f, v in batch.numeric.items()}
            partial = aggs.accumulate(numeric, batch.ts[idx], cut.groups, len(cut))
        objs = None
        if aggs.objects:
            objs, messages = event_objects(aggs, batch, idx, kids, cut, off)
            self.sessions.keep(messages)
        b = BatchSessions(cut, partial, objs)
        cutoff = self.trigger.cutoff(wm_before)
        if not self.by_offsets:
            self.sessions.loader.touching(cut.kid, cut.start, cut.last + self.gap, cutoff)
        ex = self.cache.of_keys(cut.kid)
        if not self.by_offsets and len(ex):
            # sessions past retention take part in nothing (see _retained)
            ex = ex[self.trigger.retained(self.cache.slots.last[ex], cutoff)]
        plan = merge(self.cache.sessions(ex), b, self.gap, aggs)
        surv = self.cache.apply(plan)
        closed = self.trigger.closed_before(plan.last, wm_before)
        self._settle(surv, closed)
        return int(plan.events[closed].sum())

    def _settle(self, slots: IntArray, closed: BoolArray) -> None:
        """Merged sessions closed before their batch are late: a LATE update pends."""
        late_on = self.policy.late_mode is not LateMode.OFF
        self.cache.settle(slots, closed, late_on)
        if late_on and closed.any():
            self.kernel.timers.late_marked(self.policy, self.kernel.clock.now)

    # ------------------------------------------------------------------ single path

    def _counted_without_key(self) -> None:
        """For tuple sessions a record handled without its key counts as a message."""
        if self.by_offsets:
            self._fire()

    def _add_decoded(self, got: Decoded[DecodedEvent], wall_ms: int | None) -> StepStats:
        """:meth:`_add_columns` for one fresh event, with scalars instead of arrays.

        The same semantics as a batch of one, through a scalar path: a batch of one would
        pay the whole vectorized pipeline's fixed cost per message.
        """
        kernel = self.kernel
        event, partition, offset = got.value, got.position.partition, got.offset
        wm_before = self.watermark
        if wall_ms is not None:
            kernel.clock.note_active(0, partition, wall_ms)
        kid = self.cache.keys.id_of(event.key, partition)
        t = offset if self.by_offsets else event.ts
        keep = True
        if not self.by_offsets and wm_before > NO_WATERMARK:
            if not self.trigger.event_retained_one(t, self.trigger.cutoff(wm_before)):
                # rare: see _retained
                keep = bool(self._retained(one(kid), one(t), wm_before)[0])
        late = 0
        if keep:
            late = self._apply_one(event, kid, t, partition, offset, wm_before)
            kernel.clock.observe_one(0, partition, event.ts)
        else:
            self._reject_retention(event.ts, event.key, partition, offset)
        kernel.positions.mark(0, partition, offset)
        self._after_step()
        if late and self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=int(keep), rejected=int(not keep), late=late)

    def _apply_one(
        self, event: DecodedEvent, kid: int, t: int, partition: int, offset: int, wm_before: int
    ) -> int:
        """Merge one event into its key's sessions (as :meth:`_apply`); 1 if it was late."""
        aggs, cache = self.aggs, self.cache
        cutoff = self.trigger.cutoff(wm_before)
        if not self.by_offsets:
            self.sessions.loader.touching_one(kid, t, cutoff)
        row = aggs.identity.copy()
        if aggs.width:
            aggs.accumulate_one(row, event.numeric, event.ts)
        ex = cache.sessions(cache.of_key(kid))
        s = cache.apply_one(kid, ex, merge_one(ex, t, row, self.gap, cutoff, aggs))
        if aggs.objects:
            order = Ordering(event.ts, partition, offset)
            message = cache.add_objects(s, event_values(aggs, event), order, kid)
            if message is not None:
                self.sessions.keep([message])
        closed = self.trigger.closed_before(cache.slots.last[s : s + 1], wm_before)
        self._settle(one(s), closed)
        return int(closed[0])

    # ------------------------------------------------------------------ emission

    def _after_step(self) -> None:
        """Advance the watermark after a step (not inside a batch: see ``begin_batch``);
        tuple sessions fire by offsets."""
        if not self.kernel.holding:
            self._advance_watermark(self.kernel.clock.coalesced())
        if self.by_offsets:
            self._fire()

    def _advance_watermark(self, candidate: int) -> None:
        before = self.kernel.clock.advance(candidate)
        if before is None or self.by_offsets:
            return
        self.sessions.unspill(before, self.watermark)
        self._fire()
        wm = self.watermark
        if wm < END_OF_TIME:
            # A pending LATE update of a session leaving retention goes out now.
            pend = self.cache.pending_slots()
            leaving = pend[self.trigger.leaving_retention(self.cache.slots.last[pend], wm)]
            if len(leaving):
                self._emit_late(leaving)

    def _fire(self) -> None:
        """Emit ON_TIME results for the open sessions the watermark (or offset) closed."""
        open_ = self.cache.open_slots()
        if not len(open_):
            return
        sl = self.cache.slots
        if self._eot:
            fire = open_
        elif self.by_offsets:
            parts = self.cache.keys.part_arr[sl.kid[open_]]
            positions = self.kernel.positions
            fire = open_[self.trigger.ended(sl.last[open_], parts, lambda p: positions.get(0, p))]
        else:
            fire = open_[self.trigger.on_time(sl.last[open_], self.watermark)]
        if not len(fire):
            return
        self.emitter.emit(Kind.ON_TIME, fire, dirty=False)
        self.cache.fired(fire)

    def _emit_late(self, slots: IntArray | None = None) -> None:
        pending = self.cache.pending_slots() if slots is None else slots
        if not len(pending):
            return
        self.emitter.emit(Kind.LATE, pending)
        self.cache.late_sent(pending)
        if not self.cache.any_pending():
            self.kernel.timers.late_flushed()

    def _emit_early(self) -> None:
        early = self.cache.early_slots()
        if not len(early):
            return
        self.emitter.emit(Kind.EARLY, early)
        self.cache.early_sent(early)

    def _reject_retention(self, ts: int, key: str, partition: int, offset: int) -> None:
        self.kernel.reject_retention(ts, key, "its session would end", partition, offset)

    # ------------------------------------------------------------------ restore

    def _restore_fields(self, fields: dict[str, JsonValue]) -> None:
        self.sessions.progress.load_json(fields)
        self._eot = self.watermark >= END_OF_TIME
        self.sessions.loader.restore()


if TYPE_CHECKING:

    def _satisfies_protocol(
        op: SessionAggregator,
    ) -> WindowOperator[EventBatch | Sequence[Mapping[str, Any]], ResultBatch, StoredWindow]:
        return op  # mypy checks that the operator satisfies the protocol
