"""``type: count``: windows over each key's message sequence, for one task.

Per batch of decoded events:

1. replays (offset <= last applied offset of the partition) are no-ops;
2. each key's accepted events are numbered on from the key's count and pre-aggregated
   per (key, frame), the key's current frame from the ring merged into its first group;
3. every window that became full fires ON_TIME (:class:`CountTrigger` decides which,
   :class:`CountEvaluator` gives their values);
4. the frames of still-open windows go back into the ring, and a key whose count ends
   a frame starts the next one empty.

Timers (:meth:`KeyCountWindows.timeout`) emit EARLY results of open windows that changed
every ``early_period`` of wall clock; the end of input (``END_OF_TIME``) emits every
window that still holds messages and has changed since, ON_TIME, and moves the
watermark to ``END_OF_TIME``. :meth:`KeyCountWindows.flush` writes the dirty ring slots,
pending full-state messages and the kernel's checkpoint in one WriteBatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet, PendingMessage
from window_operator.arrays import BoolArray, FloatArray, IntArray, one
from window_operator.config import CountWindow
from window_operator.count_windows.evaluator import CountEvaluator, WindowValues
from window_operator.count_windows.firing import CountTrigger
from window_operator.count_windows.numbering import Numbered, number
from window_operator.count_windows.ring import Ring
from window_operator.events import EventBatch
from window_operator.kernel import (
    LiveState,
    OperatorKernel,
    StepStats,
    StoredWindow,
    TimerAction,
)
from window_operator.keytable import KeyTable
from window_operator.policies import END_OF_TIME, EmitPolicy
from window_operator.results import Kind, ResultBatch

__all__ = ["KeyCountWindows"]


class KeyCountWindows:
    """A task's per-key count windows over RocksDB (see module doc)."""

    def __init__(
        self,
        window: CountWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        use_deduct: bool | None,
        inputs: Sequence[str] = (),
    ) -> None:
        self.aggs = aggregations
        self.policy = policy
        self.size = window.size
        self.step = window.step
        self.k = window.size // window.step
        shape = aggregations.state_shape({"type": "count", "size": self.size, "step": self.step})
        self.kernel: OperatorKernel[ResultBatch] = OperatorKernel(
            store, shape=shape, policy=policy, timed=True, inputs=inputs
        )
        self.keys: KeyTable[str] = KeyTable()
        self.ring = Ring(aggregations, self.k, self.step)
        self.trigger = CountTrigger(self.size, self.step)
        self.evaluator = CountEvaluator(self.ring, aggregations, use_deduct)
        self._restore()

    @property
    def ended(self) -> bool:
        """Whether the end of input was seen (the open windows were emitted)."""
        return self.kernel.watermark >= END_OF_TIME

    # ------------------------------------------------------------------ input

    def check_partition(self, partition: int) -> None:
        """Any partition is welcome: a key's messages are numbered across partitions."""

    def note_handled(self) -> None:
        """A record handled without its key (rejected) counts in no key's windows."""

    def add_batch(self, batch: EventBatch) -> StepStats:
        """Number, accumulate and fire; replays are skipped."""
        if not len(batch):
            return StepStats()
        kernel = self.kernel
        adm = kernel.admit(0, batch.partition, batch.offset)
        idx = np.flatnonzero(adm.fresh)
        if len(idx):
            self._apply(batch, idx, adm.offsets)
            kernel.positions.advance(0, batch.partition[idx], adm.offsets[idx])
        if batch.wall_ms is not None and len(batch.wall_ms):
            kernel.clock.note_wall(0, batch.partition, batch.wall_ms)
        return StepStats(applied=len(idx), replayed=adm.replayed)

    def _apply(self, batch: EventBatch, idx: IntArray, off: IntArray) -> None:
        every = len(idx) == len(batch)
        kids = self.keys.ids_of(batch.keys if every else [batch.keys[i] for i in idx.tolist()])
        self.ring.ensure(len(self.keys))
        num = number(kids, self.ring.count, len(self.keys), self.step)
        merged = self._merge_vectors(batch, idx, num, every)
        g_objs = self._merge_objects(batch, idx, off, num) if self.aggs.objects else []
        self._fire(num, merged, g_objs)
        self._write_back(num, merged, g_objs)

    def _merge_vectors(
        self, batch: EventBatch, idx: IntArray, num: Numbered, every: bool
    ) -> FloatArray:
        """Vector accumulators per group: the ring's for a key's current frame, plus the batch's."""
        aggs = self.aggs
        n_groups = len(num.g_kid)
        merged = aggs.identity_rows(n_groups)
        merged[num.first_group] = self.ring.acc[num.ukid, (num.c0 // self.step) % self.k]
        if aggs.width:
            numeric = batch.numeric if every else {f: v[idx] for f, v in batch.numeric.items()}
            ts = batch.ts if every else batch.ts[idx]
            merged = aggs.combine(merged, aggs.accumulate(numeric, ts, num.groups, n_groups))
        return merged

    def _merge_objects(
        self, batch: EventBatch, idx: IntArray, off: IntArray, num: Numbered
    ) -> list[list[Any]]:
        """Object accumulators per group: the ring's for a key's current frame, else new."""
        aggs = self.aggs
        g_objs = [aggs.create_objects() for _ in range(len(num.g_kid))]
        current = self.ring.objects_at(num.ukid, (num.c0 // self.step) % self.k)
        for g, objs in zip(num.first_group.tolist(), current, strict=True):
            g_objs[g] = objs  # accumulated in place, as frames are
        ops = aggs.objects
        cols = [_object_column(batch, agg.field) for agg, _ in ops]
        full = aggs.full_state
        part_l = batch.partition.tolist()
        off_l = off.tolist()
        kid_of_group = num.g_kid.tolist()
        for i, g, n in zip(idx.tolist(), num.groups.tolist(), num.n.tolist(), strict=True):
            objs = g_objs[g]
            order = Ordering(n, part_l[i], off_l[i])
            values = [_plain(col[i]) for col in cols]
            for o, (_, op) in enumerate(ops):
                objs[o] = op.accumulate(objs[o], values[o], order)
            if full:
                self.ring.queue_message(
                    PendingMessage(
                        kid_of_group[g], n, part_l[i], off_l[i], tuple(values[o] for o in full)
                    )
                )
        return g_objs

    def _fire(self, num: Numbered, merged: FloatArray, g_objs: list[list[Any]]) -> None:
        """Emit ON_TIME every window that became full in this batch."""
        ring = self.ring
        if self.k == 1:
            frames = self.trigger.full_frames(num)
            if not len(frames.groups):
                return
            seqs = np.where(frames.existed, ring.seq[frames.kids, 0], 0)
            objs = [g_objs[g] for g in frames.groups.tolist()] if self.aggs.objects else None
            values = WindowValues(merged[frames.groups], objs)
            self._emit(Kind.ON_TIME, frames.kids, frames.frames, seqs, values)
            return
        wins = self.trigger.full_windows(num)
        if wins is None:
            return
        seqs = np.where(wins.existed, ring.seq[wins.kids, wins.frames % self.k], 0)
        values = self.evaluator.full(num, wins, merged, g_objs)
        self._emit(Kind.ON_TIME, wins.kids, wins.frames, seqs, values)

    def _write_back(self, num: Numbered, merged: FloatArray, g_objs: list[list[Any]]) -> None:
        """Store the still-open frames in the ring and start the next empty frame."""
        kept = self.trigger.kept(num)
        g = kept.groups
        objs = [g_objs[i] for i in g.tolist()] if self.aggs.objects else None
        self.ring.store_frames(num.g_kid[g], num.g_frame[g] % self.k, merged[g], kept.born, objs)
        self.ring.set_counts(num.ukid, num.c1)
        done = self.trigger.frame_completed(num)
        self.ring.reset(num.ukid[done], (num.c1 // self.step)[done])

    # ------------------------------------------------------------------ emission

    def _emit_open(self, kind: Kind, flag: BoolArray) -> None:
        """Emit the open windows that contain a frame marked in ``flag``."""
        cand = np.flatnonzero(flag[: len(self.keys)].any(axis=1)).astype(np.int64)
        if not len(cand):
            return
        wins = self.trigger.open_windows(cand, self.ring.count[cand])
        wins = wins.select(np.flatnonzero(self.evaluator.marked(wins, flag)))
        if not len(wins):
            return
        values = self.evaluator.open_values(wins)
        seqs = self.ring.next_seqs(wins.kids, wins.starts % self.k)
        self._emit(kind, wins.kids, wins.starts, seqs, values)

    def _emit(
        self, kind: Kind, kids: IntArray, frames: IntArray, seqs: IntArray, values: WindowValues
    ) -> None:
        names = self.keys.names
        starts = frames.astype(np.int64) * self.step
        self.kernel.outputs.emit(
            ResultBatch(
                kind=kind,
                keys=[names[i] for i in kids.tolist()],
                window_start=starts,
                window_end=starts + self.size,
                update_seq=seqs.astype(np.int64),
                values=self.aggs.finish(values.acc, values.objs),
            )
        )

    def end_batch(self) -> None:
        """End a micro-batch (count windows fire on counts, never held back)."""
        self.kernel.holding = False

    def timeout(self, now_ms: int) -> None:
        """EARLY results every ``early_period``; at ``END_OF_TIME`` the partial windows."""
        ring, clock = self.ring, self.kernel.clock
        if now_ms >= END_OF_TIME:
            self._emit_open(Kind.ON_TIME, ring.unfinal)
            ring.input_ended()
            clock.advance(END_OF_TIME)
            return
        clock.note_now(now_ms)
        if TimerAction.EARLY in self.kernel.timers_due(False):
            self._emit_open(Kind.EARLY, ring.early)
            ring.early_emitted()

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results in columnar form, in emission order."""
        return self.kernel.outputs.take_results()

    # ------------------------------------------------------------------ persistence

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Dirty slots, messages and the checkpoint in one batch (committed unless told not)."""
        with self.kernel.flushing():
            batch = StoreBatch()
            self.ring.persist(batch, self.keys)
            self.kernel.write_checkpoint(batch, {})
            return self.kernel.commit(batch, commit=commit)

    def _restore(self) -> None:
        if self.kernel.restore() is not None:
            self.ring.restore(self.kernel.store, self.keys)

    # ------------------------------------------------------------------ inspection

    def live_state(self) -> LiveState:
        """Keys with an open window holding messages, and those windows (a key's windows
        stay open until it has ``size`` messages more)."""
        n_open = self.trigger.open_counts(self.ring.count[: len(self.keys)])
        return LiveState(keys=int(np.count_nonzero(n_open)), windows=int(n_open.sum()))

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Open windows of ``key`` overlapping messages ``[start, end)`` (partial values)."""
        kid = self.keys.ids.get(key)
        if kid is None:
            return []
        kids = one(kid)
        wins = self.trigger.open_windows(kids, self.ring.count[kids])
        wins = self.trigger.overlapping(wins, start, end)
        if not len(wins):
            return []
        acc = self.evaluator.open_values(wins)
        values = self.aggs.finish(acc.acc, acc.objs)
        # emitted at the end of input and unchanged since
        fired = self.ended & ~self.evaluator.marked(wins, self.ring.unfinal)
        return [
            StoredWindow(
                key=key,
                window_start=w * self.step,
                window_end=w * self.step + self.size,
                values={n: col[j] for n, col in values.items()},
                fired=bool(fired[j]),
            )
            for j, w in enumerate(wins.starts.tolist())
        ]


def _object_column(batch: EventBatch, field: str | None) -> list[Any]:
    """The values an object operation reads (``None`` for operations without a field)."""
    if field is None:
        return [None] * len(batch)
    if field in batch.objects:
        return batch.objects[field]
    return list(batch.numeric[field].tolist())


def _plain(value: Any) -> Any:
    """NaN (the columnar null) back to None for object operations."""
    if isinstance(value, float) and value != value:
        return None
    return value
