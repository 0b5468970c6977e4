"""Emission of time-window results: ON_TIME, EARLY, LATE, with their update sequences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from window_operator.aggset import AggregationSet
from window_operator.arrays import BoolArray, FloatArray, IntArray
from window_operator.kernel import OutputBuffer, Timers
from window_operator.keytable import KeyTable
from window_operator.policies import EmitPolicy, LateMode
from window_operator.results import Kind, ResultBatch
from window_operator.timewindows.bookkeeping import WindowBook
from window_operator.timewindows.evaluator import WindowEvaluator
from window_operator.timewindows.frame_store import FrameStore
from window_operator.timewindows.trigger import StartRange, TimeTrigger

__all__ = ["WindowEmitter"]


@dataclass(eq=False, kw_only=True)
class WindowEmitter:
    """Turns the trigger's decisions into result batches (reads frames, writes bookkeeping)."""

    keys: KeyTable[str]
    aggs: AggregationSet
    policy: EmitPolicy
    frames: FrameStore
    book: WindowBook
    trigger: TimeTrigger
    evaluator: WindowEvaluator
    outputs: OutputBuffer[ResultBatch]
    timers: Timers
    size: int = field(init=False)
    step: int = field(init=False)

    def __post_init__(self) -> None:
        self.size = self.trigger.size
        self.step = self.trigger.step

    def on_time(self, wm_before: int, wm_after: int) -> None:
        """ON_TIME results of the windows the watermark passed."""
        fired = self.trigger.on_time(wm_before, wm_after)
        if fired is not None:
            self._emit_range(fired, Kind.ON_TIME, None)

    def early(self, wm: int) -> None:
        """EARLY results of the open windows whose frames changed since the last ones."""
        if not self.frames.early_dirty.any():
            return
        self._emit_range(self.trigger.open_windows(wm), Kind.EARLY, self.frames.early_dirty)
        self.frames.clear_early()

    def mark_late(
        self, kid: int, frame: int, wm_before: int, created: set[tuple[int, int]], now: int
    ) -> None:
        """Mark the fired, retained windows containing ``frame`` for a LATE re-emission."""
        emit = self.policy.late_mode is not LateMode.OFF
        for w in self.trigger.late_windows(frame, wm_before):
            # Without bookkeeping the window fired ON_TIME (seq 0) iff it had a frame
            # before this step; otherwise this is its first emission.
            def existed(w: int = w) -> bool:
                return any(
                    (kid, f) not in created and self.frames.exists(kid, f)
                    for f in range(w, w + self.size, self.step)
                )

            self.book.mark_late((kid, w), existed, emit)
            if emit:
                self.timers.late_marked(self.policy, now)

    def late(self, only_upto: int | None = None) -> None:
        """LATE results of the pending windows (starting at or before ``only_upto``)."""
        if not self.book.pending:
            return
        due_windows = self.book.take_pending(only_upto)
        if not due_windows:
            return
        if not self.book.pending:
            self.timers.late_flushed()
        acc, objs, _ = self.evaluator.gather(due_windows)
        kids = np.array([w[0] for w in due_windows], dtype=np.int64)
        starts = np.array([w[1] for w in due_windows], dtype=np.int64)
        self._emit(Kind.LATE, kids, starts, acc, objs)

    def _emit_range(self, starts: StartRange, kind: Kind, mark: BoolArray | None) -> None:
        for ev in self.evaluator.dense(starts, mark):
            self._emit(kind, ev.kids, ev.starts, ev.acc, ev.objs)

    def _emit(
        self,
        kind: Kind,
        kids: IntArray,
        starts: IntArray,
        acc: FloatArray,
        objs: list[list[Any]] | None,
    ) -> None:
        names = self.keys.names
        starts = starts.astype(np.int64)
        self.outputs.emit(
            ResultBatch(
                kind=kind,
                keys=[names[k] for k in kids.tolist()],
                window_start=starts,
                window_end=starts + self.size,
                update_seq=self.book.seqs(kind, kids, starts),
                values=self.aggs.finish(acc, objs),
            )
        )
