"""Input handling: replays, the retention check, merging, then the clocks.

Per call (a batch; a single message takes a scalar path with the same semantics):
replays (offset <= last applied offset of the partition) are no-ops; with the watermark
as it stood *before* the call, events past retention go to the error output (time
sessions only); accepted events are merged into sessions; then the watermark (or, for
tuple sessions, the partition offset) advances and every session it passed fires.
"""

from __future__ import annotations

import numpy as np
import orjson

from window_operator.aggregator import StepStats
from window_operator.events import DecodedEvent, EventBatch
from window_operator.policies import NO_WATERMARK, LateMode
from window_operator.positions import assign_offsets, fresh_mask
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.session.arrays import BoolArray, IntArray, one
from window_operator.session.merge_one import SingleMerge
from window_operator.session.watermark import WatermarkClock

__all__ = ["SessionIngest"]


class SessionIngest(SingleMerge, WatermarkClock):
    """Applies fresh, retained input events (batch and scalar paths)."""

    def _add_columns(self, batch: EventBatch) -> StepStats:
        n = len(batch)
        if n == 0:
            return StepStats()
        wm_before = self._wm
        part = batch.partition
        off = assign_offsets(self._offsets, part, batch.offset)
        fresh = fresh_mask(self._offsets, part, off)
        idx = np.flatnonzero(fresh)
        replayed = n - len(idx)
        rejected = 0
        late = 0
        if batch.wall_ms is not None and len(batch.wall_ms):
            # the arrival clock, before late marks start the LATE period from it
            self._note_wall(part, batch.wall_ms)
        if len(idx):
            keys = batch.keys if len(idx) == n else [batch.keys[i] for i in idx.tolist()]
            kids = self.keys.ids(keys, part[idx])
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
        # Offsets advance for every fresh record, rejected ones included: they were handled.
        _advance_offsets(self._offsets, part[fresh], off[fresh])
        if len(idx):
            self._advance_max_ts(part[idx], batch.ts[idx])
        self._advance_watermark(self._coalesced_watermark())
        if self.by_offsets:
            self._fire()
        if self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=len(idx), replayed=replayed, rejected=rejected, late=late)

    def _retained(self, kids: IntArray, ts: IntArray, wm_before: int) -> BoolArray:
        """Events within retention (decided with the watermark before the call).

        An event is kept if its own interval ends within retention (``ts + gap +
        retention > watermark``), or if it lies inside the span ``[start, last]`` of a
        retained session (an event from far behind inside a long open session), which
        it joins without moving its bounds. A session past retention takes part in
        nothing, whether or not the store still holds it, so decisions do not depend
        on when flushes ran. Together the two rules keep every retained session after
        the last event of every expired session of its key: their Message Store ranges
        never interleave, so expiry can range-delete a key's messages up to a time.
        """
        gap = self._gap
        cutoff = wm_before - self.policy.retention
        keep: BoolArray = ts + gap > cutoff
        cand = np.flatnonzero(~keep)
        if not len(cand):
            return keep
        c_kid, c_ts = kids[cand], ts[cand]
        self._load_touching(c_kid, c_ts, c_ts, cutoff)
        mask = np.zeros(len(self.keys) + 1, dtype=np.bool_)
        mask[c_kid] = True
        sl = self.slots
        by_kid: dict[int, list[int]] = {}
        for s in sl.of_kids(mask).tolist():
            if int(sl.last[s]) + gap > cutoff:
                by_kid.setdefault(int(sl.kid[s]), []).append(s)
        for j, (k, t) in enumerate(zip(c_kid.tolist(), c_ts.tolist(), strict=True)):
            for s in by_kid.get(k, ()):
                if int(sl.start[s]) <= t <= int(sl.last[s]):
                    keep[cand[j]] = True
                    break
        return keep

    def _add_one(
        self, event: DecodedEvent, partition: int, offset: int, wall_ms: int | None
    ) -> StepStats:
        """:meth:`_add_columns` for one fresh event, with scalars instead of arrays."""
        wm_before = self._wm
        if wall_ms is not None:
            self._now = max(self._now, wall_ms)
            active = self._last_active.get(partition, NO_WATERMARK)
            self._last_active[partition] = max(active, wall_ms)
        kid = self.keys.id_of(event.key, partition)
        t = offset if self.by_offsets else event.ts
        keep = True
        if not self.by_offsets and wm_before > NO_WATERMARK:
            if t + self._gap <= wm_before - self.policy.retention:  # rare: see _retained
                keep = bool(self._retained(one(kid), one(t), wm_before)[0])
        late = 0
        if keep:
            late = self._apply_one(event, kid, t, partition, offset, wm_before)
            if event.ts > self._max_ts.get(partition, NO_WATERMARK):
                self._max_ts[partition] = event.ts
        else:
            self._reject_retention(event.ts, event.key, partition, offset)
        self._offsets[partition] = offset
        self._advance_watermark(self._coalesced_watermark())
        if self.by_offsets:
            self._fire()
        if late and self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=int(keep), rejected=int(not keep), late=late)

    def _reject_retention(self, ts: int, key: str, partition: int, offset: int) -> None:
        self._errors.append(
            ErrorRecord(
                code=ErrorCode.OUT_OF_RETENTION,
                reason=(
                    f"event time {ts} of key {key!r} is out of retention: its session would "
                    f"end more than {self.policy.retention} ms before the watermark {self._wm}"
                ),
                partition=partition,
                offset=offset,
                raw=orjson.dumps({"key": key, "ts": ts}),
            )
        )


def _advance_offsets(offsets: dict[int, int], part: IntArray, off: IntArray) -> None:
    """Raise each partition's last applied offset to the largest of ``off``."""
    for p in np.unique(part).tolist():
        m = int(off[part == p].max())
        if m > offsets.get(p, -1):
            offsets[p] = m
