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
bookkeeping and the task checkpoint in one WriteBatch, expires state past retention by
range delete and evicts closed frames from memory.

Results and errors accumulate until :meth:`get_result` / :meth:`take_result_batches`
and :meth:`get_errors` hand them over (the seed's standalone API).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from stores.keys import decode_i64, decode_str, encode_i64, prefix_upper_bound
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import AggregationSet
from window_operator.clock import OutputBuffer, PartitionClock
from window_operator.events import DecodedEvent, EventBatch, RecordDecoder, RecordRejected
from window_operator.frames import FRAME_TAG, WINDOW_TAG, FrameCache, KeyTable, PendingMessage
from window_operator.policies import END_OF_TIME, NO_WATERMARK, EmitPolicy, LateMode
from window_operator.positions import assign_offsets, fresh_mask
from window_operator.results import ErrorCode, ErrorRecord, Kind, ResultBatch
from window_operator.windows import TimeWindowing

__all__ = ["StepStats", "StoredWindow", "WindowedAggregator"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_CHECKPOINT_KEY = b"task"
_WMETA = struct.Struct(">qB")
#: Windows evaluated together when firing; bounds the dense working set.
_CHUNK_WINDOWS = 32


@dataclass(frozen=True, slots=True)
class StepStats:
    """What one call did with its input."""

    applied: int = 0
    replayed: int = 0
    rejected: int = 0
    late: int = 0


@dataclass(frozen=True, slots=True)
class StoredWindow:
    """A window as currently stored (for inspection and joins)."""

    key: str
    window_start: int
    window_end: int
    values: dict[str, Any]
    fired: bool


@dataclass(slots=True)
class _WindowMeta:
    next_seq: int
    pending: bool


class WindowedAggregator(PartitionClock, OutputBuffer):
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
    ) -> None:
        self.windowing = windowing
        self.aggs = aggregations
        self.policy = policy
        self.store = store
        self.decoder = decoder
        if use_deduct and not aggregations.deductible:
            raise ValueError("use_deduct=True but not every aggregation has deduct")
        self.use_deduct = aggregations.deductible if use_deduct is None else use_deduct
        self.keys = KeyTable()
        self.frames = FrameCache(aggregations, store, self.keys, windowing.step)
        self._size = windowing.size
        self._step = windowing.step
        self._k = windowing.frames_per_window
        # checkpointed
        self._offsets: dict[int, int] = {}
        self._max_ts: dict[int, int] = {}
        self._wm = NO_WATERMARK
        self._late_since: int | None = None
        self._last_early: int | None = None
        self._expired_upto: int | None = None
        self.batches = 0
        # wall clock
        self._now = NO_WATERMARK
        self._last_active: dict[int, int] = {}
        # window bookkeeping (W records): only windows with EARLY or LATE history
        self._wmeta: dict[tuple[int, int], _WindowMeta] = {}
        self._wmeta_dirty: set[tuple[int, int]] = set()
        self._late_pending: dict[tuple[int, int], None] = {}
        # outputs
        self._results: list[ResultBatch] = []
        self._errors: list[ErrorRecord] = []
        self._restore()

    # ------------------------------------------------------------------ properties

    @property
    def watermark(self) -> int:
        """The task's watermark (min over active partitions, never decreasing)."""
        return self._wm

    @property
    def offsets(self) -> dict[int, int]:
        """Last applied offset per input partition."""
        return dict(self._offsets)

    # ------------------------------------------------------------------ public API

    def add_message(
        self,
        message: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> StepStats:
        """Add one decoded input record (a dict in the job's input schema)."""
        if self.decoder is None:
            raise ValueError("add_message needs a RecordDecoder (build the aggregator from a job)")
        last = self._offsets.get(partition, -1)
        if offset is not None and offset <= last:
            return StepStats(replayed=1)
        try:
            event = self.decoder.decode_one(message)
        except RecordRejected as rej:
            off = last + 1 if offset is None else offset
            self._offsets[partition] = off
            self._errors.append(ErrorRecord(rej.code, rej.reason, partition, off, _raw(message)))
            return StepStats(rejected=1)
        return self._add_one(event, partition, offset, wall_ms)

    def mark_consumed(self, partition: int, offset: int) -> None:
        """Record that ``offset`` of ``partition`` was handled outside (e.g. sent to errors)."""
        if offset > self._offsets.get(partition, -1):
            self._offsets[partition] = offset

    def add_batch(self, batch: EventBatch | Sequence[Mapping[str, Any]]) -> StepStats:
        """Add many messages at once (columns, or records decoded with the job's decoder).

        Lateness and retention are decided with the watermark as it stood before the
        batch, so a replayed batch decides exactly the same way; the stored state and
        the final result of every window equal those of adding the messages one by one.
        """
        if not isinstance(batch, EventBatch):
            if self.decoder is None:
                raise ValueError("add_batch of records needs a RecordDecoder")
            records = list(batch)
            # every record takes the next offset of partition 0, rejected ones too,
            # exactly as add_message does one at a time
            first = self._offsets.get(0, -1) + 1
            offsets = list(range(first, first + len(records)))
            decoded = self.decoder.decode_records(records, offsets=offsets)
            self._errors.extend(decoded.errors)
            stats = self._add_columns(decoded.batch)
            if offsets:
                self.mark_consumed(0, offsets[-1])
            return StepStats(
                stats.applied, stats.replayed, stats.rejected + len(decoded.errors), stats.late
            )
        return self._add_columns(batch)

    def timeout(self, now_ms: int) -> None:
        """Run the wall-clock policies at ``now_ms``; :data:`END_OF_TIME` fires everything."""
        if now_ms >= END_OF_TIME:
            self._now = END_OF_TIME
            self._advance_watermark(END_OF_TIME)
            self._emit_late()
            return
        self._now = max(self._now, now_ms)
        if self.policy.idle_timeout is not None and self._max_ts:
            self._advance_watermark(self._coalesced_watermark())
        p = self.policy
        if self._late_pending and p.late_mode is LateMode.PERIOD:
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
        """Persist state and checkpoint atomically; expire and evict; return the writes.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        them (changelog) and commits them itself. Memory then already reflects them,
        so if the caller cannot commit it must discard this aggregator and reopen.
        """
        batch = StoreBatch()
        cutoff = self._expiry_cutoff()
        if cutoff is not None:
            self._emit_late(only_upto=cutoff)
        self.frames.persist(batch)
        for kw in self._wmeta_dirty:
            meta = self._wmeta.get(kw)
            if meta is not None:
                batch.put(
                    ColumnFamily.WINDOW_META,
                    self._wmeta_key(*kw),
                    _WMETA.pack(meta.next_seq, int(meta.pending)),
                )
        self._wmeta_dirty.clear()
        if cutoff is not None and (self._expired_upto is None or cutoff > self._expired_upto):
            self.frames.expire(batch, cutoff, self._expired_upto)
            batch.delete_range(
                ColumnFamily.WINDOW_META,
                WINDOW_TAG + encode_i64(-(2**63)),
                WINDOW_TAG + encode_i64(cutoff + 1),
            )
            for kw in [kw for kw in self._wmeta if kw[1] <= cutoff]:
                del self._wmeta[kw]
            self._expired_upto = cutoff
        self.batches += 1
        batch.put(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY, self._checkpoint_bytes())
        if commit:
            self.store.commit(batch)
        # Frames whose every window has fired are in the store now; keep memory small.
        if self._wm > NO_WATERMARK:
            self.frames.evict_closed(self._wm - self._size + 1)
            for kw in [kw for kw, m in self._wmeta.items() if not m.pending]:
                if kw[1] + self._size <= self._wm:
                    del self._wmeta[kw]
        return batch

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        if self.store.closed:
            return
        self.flush()
        self.store.close()

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` that overlap ``[start, end)``, in start order."""
        kid = self.keys.id_of(key)
        # Windows are derived from the key's frames (a window exists iff it holds one):
        # the frames of the range are found by a time-range scan of the store (keys are
        # time-first) plus the cached ones, so the cost follows the state, not the range.
        f_lo = max(start, NO_WATERMARK) - self._size + self._step
        f_hi = min(end, END_OF_TIME)
        frames = {f for (k, f) in self.frames.slot_of if k == kid and f_lo <= f < f_hi}
        lo = FRAME_TAG + encode_i64(self.windowing.floor(f_lo))
        hi = FRAME_TAG + encode_i64(f_hi)
        enc = self.keys.encoded[kid]
        for k, _ in self.store.scan(ColumnFamily.WINDOW_META, lo, hi):
            if k.endswith(enc) and len(k) == 9 + len(enc):
                frames.add(decode_i64(k, 1))
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
        acc, objs, exists = self._gather([(kid, w) for w in wins])
        idx = [i for i, e in enumerate(exists) if e]
        if not idx:
            return []
        values = self.aggs.finish(acc[idx], [objs[i] for i in idx] if objs else None)
        names = list(values)
        return [
            StoredWindow(
                key=key,
                window_start=wins[i],
                window_end=wins[i] + self._size,
                values={n: values[n][j] for n in names},
                fired=wins[i] + self._size <= self._wm,
            )
            for j, i in enumerate(idx)
        ]

    # ------------------------------------------------------------------ batch path

    def _add_columns(self, batch: EventBatch) -> StepStats:
        n = len(batch)
        if n == 0:
            return StepStats()
        wm_before = self._wm
        part = batch.partition
        off = assign_offsets(self._offsets, part, batch.offset)
        fresh = fresh_mask(self._offsets, part, off)
        replayed = int(n - fresh.sum())
        frames = self.windowing.frames_of(batch.ts)
        accept = fresh.copy()
        rejected = 0
        if wm_before > NO_WATERMARK:
            retained = frames + (self._size + self.policy.retention) > wm_before
            too_old = fresh & ~retained
            if too_old.any():
                for i in np.flatnonzero(too_old).tolist():
                    self._reject_retention(
                        int(batch.ts[i]), batch.keys[i], int(part[i]), int(off[i])
                    )
                rejected = int(too_old.sum())
                accept &= retained
        idx = np.flatnonzero(accept)
        if batch.wall_ms is not None and len(batch.wall_ms):
            # before applying: a late mark starts its period at this batch's wall clock
            self._note_wall(part, batch.wall_ms)
        late = 0
        if len(idx):
            late = self._apply(batch, idx, frames[idx], off, wm_before)
        # Offsets advance for every fresh record, including rejected ones: they were handled.
        self._advance_offsets(part[fresh], off[fresh])
        if len(idx):
            self._advance_max_ts(part[idx], batch.ts[idx])
        self._advance_watermark(self._coalesced_watermark())
        if self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=len(idx), replayed=replayed, rejected=rejected, late=late)

    def _apply(
        self, batch: EventBatch, idx: IntArray, frames: IntArray, off: IntArray, wm_before: int
    ) -> int:
        keys = batch.keys
        sel_keys = keys if len(idx) == len(keys) else [keys[i] for i in idx.tolist()]
        kids = self.keys.ids_of(sel_keys)
        ts = batch.ts[idx]
        fmin = int(frames.min())
        span = (int(frames.max()) - fmin) // self._step + 1
        nk = int(kids.max()) + 1
        if nk * span <= 8 * len(kids) + 4096:
            # dense: a presence table over (key, frame) beats sorting the batch
            code = kids * span + (frames - fmin) // self._step
            present = np.zeros(nk * span, dtype=np.bool_)
            present[code] = True
            ucode = np.flatnonzero(present)
            rank = np.cumsum(present, dtype=np.int64) - 1
            groups = rank[code]
            g_kid = ucode // span
            g_frame = (ucode % span) * self._step + fmin
        elif nk * span < 2**62:
            code = kids * span + (frames - fmin) // self._step
            ucode, groups = np.unique(code, return_inverse=True)
            g_kid = ucode // span
            g_frame = (ucode % span) * self._step + fmin
        else:  # astronomically sparse batch: fall back to a lexicographic sort
            order = np.lexsort((frames, kids))
            sk, sf = kids[order], frames[order]
            starts = np.concatenate(([True], (sk[1:] != sk[:-1]) | (sf[1:] != sf[:-1])))
            gid_sorted = np.cumsum(starts) - 1
            groups = np.empty_like(gid_sorted)
            groups[order] = gid_sorted
            g_kid, g_frame = sk[starts], sf[starts]
        groups = groups.astype(np.int64, copy=False)
        n_groups = len(g_kid)
        numeric = (
            {f: v[idx] for f, v in batch.numeric.items()}
            if len(idx) != len(keys)
            else batch.numeric
        )
        on_disk = g_frame + self._size <= wm_before
        slots, created = self.frames.resolve(g_kid, g_frame, on_disk)
        fc = self.frames
        if self.aggs.width:
            partial = self.aggs.accumulate(numeric, ts, groups, n_groups)
            fc.acc[slots] = self.aggs.combine(fc.acc[slots], partial)
        if self.aggs.objects:
            self._accumulate_objects(batch, idx, groups, slots, off, kids)
        fc.dirty[slots] = True
        fc.early_dirty[slots] = True
        late_groups = np.flatnonzero(g_frame + self._step <= wm_before)
        late = 0
        if len(late_groups):
            created_pairs = {
                (int(g_kid[g]), int(g_frame[g])) for g in late_groups.tolist() if created[g]
            }
            for g in late_groups.tolist():
                self._mark_late(int(g_kid[g]), int(g_frame[g]), wm_before, created_pairs)
            late_ev = np.isin(groups, late_groups)
            late = int(late_ev.sum())
        return late

    def _accumulate_objects(
        self,
        batch: EventBatch,
        idx: IntArray,
        groups: IntArray,
        slots: IntArray,
        off: IntArray,
        kids: IntArray,
    ) -> None:
        objs_of = self.frames.objs
        ops = self.aggs.objects
        fields = [agg.field for agg, _ in ops]
        n = len(batch)
        cols = [
            [None] * n
            if f is None
            else batch.objects[f]
            if f in batch.objects
            else batch.numeric[f].tolist()
            for f in fields
        ]
        full = self.aggs.full_state
        ts_l = batch.ts.tolist()
        part_l = batch.partition.tolist()
        off_l = off.tolist()
        slot_l = slots.tolist()
        kid_l = kids.tolist()
        pending = self.frames.pending_messages
        for j, i in enumerate(idx.tolist()):
            s = slot_l[int(groups[j])]
            objs = objs_of[s]
            assert objs is not None
            order = Ordering(ts_l[i], part_l[i], off_l[i])
            for o, (_, op) in enumerate(ops):
                objs[o] = op.accumulate(objs[o], _plain(cols[o][i]), order)
            if full:
                pending.append(
                    PendingMessage(
                        kid_l[j],
                        ts_l[i],
                        part_l[i],
                        off_l[i],
                        tuple(_plain(cols[o][i]) for o in full),
                    )
                )

    # ------------------------------------------------------------------ single path

    def _add_one(
        self, event: DecodedEvent, partition: int, offset: int | None, wall_ms: int | None
    ) -> StepStats:
        key, ts, numeric = event.key, event.ts, event.numeric
        last = self._offsets.get(partition, -1)
        if offset is None:
            offset = last + 1
        elif offset <= last:
            return StepStats(replayed=1)
        wm_before = self._wm
        frame = ts - ts % self._step
        self._offsets[partition] = offset
        if wall_ms is not None:
            self._now = max(self._now, wall_ms)
            self._last_active[partition] = wall_ms
        if wm_before > NO_WATERMARK and frame + self._size + self.policy.retention <= wm_before:
            self._reject_retention(ts, key, partition, offset)
            self._advance_watermark(self._coalesced_watermark())
            return StepStats(rejected=1)
        kid = self.keys.id_of(key)
        fc = self.frames
        slot = fc.slot_of.get((kid, frame))
        created = False
        if slot is None:
            if frame + self._size <= wm_before:
                slot = fc.load([(kid, frame)])[0]
            if slot is None or slot < 0:
                slot = fc.allocate(kid, frame)
                created = True
        if self.aggs.width:
            self.aggs.accumulate_one(fc.acc[slot], numeric, ts)
        if self.aggs.objects:
            o_acc = fc.objs[slot]
            assert o_acc is not None
            order = Ordering(ts, partition, offset)
            vals: list[Any] = []
            for o, (agg, op) in enumerate(self.aggs.objects):
                v = _field_value(event, agg.field)
                vals.append(v)
                o_acc[o] = op.accumulate(o_acc[o], v, order)
            if self.aggs.full_state:
                fc.pending_messages.append(
                    PendingMessage(
                        kid, ts, partition, offset, tuple(vals[o] for o in self.aggs.full_state)
                    )
                )
        fc.dirty[slot] = True
        fc.early_dirty[slot] = True
        late = 0
        if frame + self._step <= wm_before:
            self._mark_late(kid, frame, wm_before, {(kid, frame)} if created else set())
            late = 1
        if ts > self._max_ts.get(partition, NO_WATERMARK):
            self._max_ts[partition] = ts
            self._advance_watermark(self._coalesced_watermark())
        if late and self.policy.late_mode is LateMode.PER_ARRIVAL:
            self._emit_late()
        return StepStats(applied=1, late=late)

    # ------------------------------------------------------------------ watermark

    def _advance_offsets(self, part: IntArray, off: IntArray) -> None:
        if not len(part):
            return
        for p in np.unique(part).tolist():
            m = int(off[part == p].max())
            if m > self._offsets.get(p, -1):
                self._offsets[p] = m

    def _advance_watermark(self, wm: int) -> None:
        wm_before = self._wm
        if wm <= wm_before:
            return
        self._wm = wm
        self._fire(wm_before, wm)

    # ------------------------------------------------------------------ emission

    def _fire(self, wm_before: int, wm_after: int) -> None:
        """Emit ON_TIME results for windows whose end is in ``(wm_before, wm_after]``."""
        w_hi = self.windowing.floor(wm_after - self._size)
        w_lo = (
            NO_WATERMARK
            if wm_before <= NO_WATERMARK
            else self.windowing.ceil(wm_before - self._size + 1)
        )
        if w_lo > w_hi:
            return
        self._emit_range(w_lo, w_hi, Kind.ON_TIME, None)

    def _emit_early(self) -> None:
        fc = self.frames
        if not fc.early_dirty.any():
            return
        w_lo = (
            NO_WATERMARK
            if self._wm <= NO_WATERMARK
            else self.windowing.ceil(self._wm - self._size + 1)
        )
        self._emit_range(w_lo, END_OF_TIME, Kind.EARLY, fc.early_dirty)
        fc.early_dirty[:] = False

    def _emit_range(self, w_lo: int, w_hi: int, kind: Kind, mark: BoolArray | None) -> None:
        """Evaluate every existing window with start in ``[w_lo, w_hi]`` (dense, chunked)."""
        fc = self.frames
        size, step = self._size, self._step
        live = fc.kid >= 0
        f_lo = max(w_lo, NO_WATERMARK)
        f_hi = w_hi + size - step if w_hi < END_OF_TIME else END_OF_TIME
        sel = np.flatnonzero(live & (fc.frame >= f_lo) & (fc.frame <= f_hi))
        if mark is not None:
            # Only windows that contain a marked frame are wanted; unmarked frames of
            # those windows still contribute.
            marked = sel[mark[sel]]
            if not len(marked):
                return
            mf = fc.frame[marked]
            w_lo = max(w_lo, int(mf.min()) - size + step)
            w_hi = min(w_hi, int(mf.max()))
            sel = sel[(fc.frame[sel] >= w_lo) & (fc.frame[sel] <= w_hi + size - step)]
        if not len(sel):
            return
        frames = fc.frame[sel]
        ufr = np.unique(frames)
        c = max(w_lo, int(ufr[0]) - size + step)
        last_w = min(w_hi, int(ufr[-1]))
        while c <= last_w:
            c_hi = min(last_w, c + (_CHUNK_WINDOWS - 1) * step)
            in_chunk = (frames >= c) & (frames <= c_hi + size - step)
            if in_chunk.any():
                self._emit_chunk(sel[in_chunk], c, c_hi, kind, mark)
            c = c_hi + step
            pos = int(np.searchsorted(ufr, c))
            if pos >= len(ufr):
                break
            c = max(c, int(ufr[pos]) - size + step)

    def _emit_chunk(
        self, slots: IntArray, c_lo: int, c_hi: int, kind: Kind, mark: BoolArray | None
    ) -> None:
        fc = self.frames
        aggs = self.aggs
        step, k = self._step, self._k
        n_w = (c_hi - c_lo) // step + 1
        length = n_w + k - 1
        ukid, row = np.unique(fc.kid[slots], return_inverse=True)
        col = (fc.frame[slots] - c_lo) // step
        nk = len(ukid)
        present = np.zeros((nk, length), dtype=np.bool_)
        present[row, col] = True
        exists = _window_any(present, k, n_w)
        if mark is not None:
            mk = np.zeros((nk, length), dtype=np.bool_)
            mk[row, col] = mark[slots]
            exists &= _window_any(mk, k, n_w)
        r_idx, w_idx = np.nonzero(exists)
        if not len(r_idx):
            return
        width = aggs.width
        acc_out = np.empty((len(r_idx), width))
        if width:
            grid = np.empty((nk, length, width))
            grid[:] = aggs.identity
            grid[row, col] = fc.acc[slots]
            values = self._slide(grid, n_w)
            acc_out = values[r_idx, w_idx]
        objs_out: list[list[Any]] | None = None
        if aggs.objects:
            slot_grid = np.full((nk, length), -1, dtype=np.int64)
            slot_grid[row, col] = slots
            objs_out = []
            for r, w in zip(r_idx.tolist(), w_idx.tolist(), strict=True):
                objs_out.append(self._combine_objs(slot_grid[r, w : w + k].tolist()))
        kids = ukid[r_idx]
        starts = c_lo + w_idx.astype(np.int64) * step
        self._emit(kind, kids, starts, acc_out, objs_out)

    def _slide(self, grid: FloatArray, n_w: int) -> FloatArray:
        """Window values from a ``(keys, frames, width)`` grid: frames combined k at a time."""
        aggs = self.aggs
        k = self._k
        nk, _, width = grid.shape
        if k == 1:
            return grid
        if self.use_deduct:
            # Jet: the next window is the previous one minus its trailing frame plus
            # the new leading frame.
            out = np.empty((nk, n_w, width))
            run = grid[:, 0]
            for j in range(1, k):
                run = aggs.combine(run, grid[:, j])
            out[:, 0] = run
            for i in range(1, n_w):
                run = aggs.combine(aggs.deduct(run, grid[:, i - 1]), grid[:, i + k - 1])
                out[:, i] = run
            return out
        flat = grid[:, 0:n_w].reshape(-1, width)
        for j in range(1, k):
            flat = aggs.combine(flat, np.ascontiguousarray(grid[:, j : j + n_w]).reshape(-1, width))
        result: FloatArray = flat.reshape(nk, n_w, width)
        return result

    def _combine_objs(self, slots: list[int]) -> list[Any]:
        objs = self.frames.objs
        acc = self.aggs.create_objects()
        for s in slots:
            if s >= 0:
                o = objs[s]
                assert o is not None
                acc = self.aggs.combine_objects(acc, o)
        return acc

    def _emit(
        self,
        kind: Kind,
        kids: IntArray,
        starts: IntArray,
        acc: FloatArray,
        objs: list[list[Any]] | None,
    ) -> None:
        n = len(kids)
        seqs = np.zeros(n, dtype=np.int64)
        kid_l = kids.tolist()
        start_l = starts.tolist()
        if kind is Kind.EARLY:
            for i in range(n):
                kw = (kid_l[i], start_l[i])
                meta = self._wmeta.get(kw)
                if meta is None:
                    meta = self._wmeta[kw] = _WindowMeta(0, False)
                seqs[i] = meta.next_seq
                meta.next_seq += 1
                self._wmeta_dirty.add(kw)
        elif self._wmeta:
            for i in range(n):
                kw = (kid_l[i], start_l[i])
                meta = self._wmeta.get(kw)
                if meta is not None:
                    seqs[i] = meta.next_seq
                    meta.next_seq += 1
                    self._wmeta_dirty.add(kw)
        names = self.keys.names
        self._results.append(
            ResultBatch(
                kind=kind,
                keys=[names[k] for k in kid_l],
                window_start=starts.astype(np.int64),
                window_end=starts.astype(np.int64) + self._size,
                update_seq=seqs,
                values=self.aggs.finish(acc, objs),
            )
        )

    # ------------------------------------------------------------------ late windows

    def _mark_late(
        self, kid: int, frame: int, wm_before: int, created: set[tuple[int, int]]
    ) -> None:
        """Mark the fired, retained windows containing ``frame`` for a LATE re-emission."""
        size, step = self._size, self._step
        fired_hi = self.windowing.floor(wm_before - size)
        ret_lo = self.windowing.ceil(wm_before - size - self.policy.retention + 1)
        lo = max(frame - size + step, ret_lo)
        hi = min(frame, fired_hi)
        for w in range(lo, hi + 1, step):
            kw = (kid, w)
            meta = self._wmeta.get(kw) or self._load_wmeta(kw)
            if meta is None:
                # No bookkeeping: the window fired ON_TIME (seq 0) iff it had a frame
                # before this step; otherwise this is its first emission.
                existed = any(
                    (kid, f) not in created and self.frames.exists(kid, f)
                    for f in range(w, w + size, step)
                )
                meta = _WindowMeta(1 if existed else 0, True)
                self._wmeta[kw] = meta
            if self.policy.late_mode is LateMode.OFF:
                continue
            meta.pending = True
            self._wmeta_dirty.add(kw)
            self._late_pending[kw] = None
            if self._late_since is None and self.policy.late_mode is LateMode.PERIOD:
                self._late_since = None if self._now <= NO_WATERMARK else self._now

    def _emit_late(self, only_upto: int | None = None) -> None:
        if not self._late_pending:
            return
        pairs = [kw for kw in self._late_pending if only_upto is None or kw[1] <= only_upto]
        if not pairs:
            return
        pairs.sort(key=lambda kw: (kw[1], kw[0]))
        acc, objs, _ = self._gather(pairs)
        for kw in pairs:
            del self._late_pending[kw]
            self._wmeta[kw].pending = False
        if not self._late_pending:
            self._late_since = None
        kids = np.array([kw[0] for kw in pairs], dtype=np.int64)
        starts = np.array([kw[1] for kw in pairs], dtype=np.int64)
        self._emit(Kind.LATE, kids, starts, acc, objs)

    def _gather(
        self, windows: Sequence[tuple[int, int]]
    ) -> tuple[FloatArray, list[list[Any]] | None, list[bool]]:
        """Evaluate specific windows by gathering their frames (loading evicted ones)."""
        step, k = self._step, self._k
        pairs = [(kid, w + j * step) for kid, w in windows for j in range(k)]
        slots = np.asarray(self.frames.get_or_load(pairs), dtype=np.int64).reshape(-1, k)
        has_frame: BoolArray = np.any(slots >= 0, axis=1)
        exists = [bool(x) for x in has_frame]
        n = len(windows)
        acc = self.aggs.identity_rows(n)
        fc = self.frames
        for j in range(k):
            s = slots[:, j]
            have = s >= 0
            if have.any():
                part = acc[have]
                acc[have] = self.aggs.combine(part, fc.acc[s[have]])
        objs = None
        if self.aggs.objects:
            objs = [self._combine_objs(slots[i].tolist()) for i in range(n)]
        return acc, objs, exists

    def _load_wmeta(self, kw: tuple[int, int]) -> _WindowMeta | None:
        data = self.store.get(ColumnFamily.WINDOW_META, self._wmeta_key(*kw))
        if data is None:
            return None
        seq, pending = _WMETA.unpack(data)
        meta = _WindowMeta(seq, bool(pending))
        self._wmeta[kw] = meta
        return meta

    def _wmeta_key(self, kid: int, w: int) -> bytes:
        return WINDOW_TAG + encode_i64(w) + self.keys.encoded[kid]

    # ------------------------------------------------------------------ errors

    def _reject_retention(self, ts: int, key: str, partition: int, offset: int) -> None:
        self._errors.append(
            ErrorRecord(
                code=ErrorCode.OUT_OF_RETENTION,
                reason=(
                    f"event time {ts} of key {key!r} is out of retention: its last window "
                    f"ended more than {self.policy.retention} ms before the watermark {self._wm}"
                ),
                partition=partition,
                offset=offset,
                raw=orjson.dumps({"key": key, "ts": ts}),
            )
        )

    # ------------------------------------------------------------------ persistence

    def _expiry_cutoff(self) -> int | None:
        """Largest frame start whose every window is past retention (None: nothing yet)."""
        if self._wm <= NO_WATERMARK:
            return None
        if self._wm >= END_OF_TIME:
            return None
        return self.windowing.floor(self._wm - self._size - self.policy.retention)

    def _checkpoint_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "offsets": {str(p): o for p, o in self._offsets.items()},
                "max_ts": {str(p): t for p, t in self._max_ts.items()},
                "watermark": self._wm,
                "late_since": self._late_since,
                "last_early": self._last_early,
                "expired_upto": self._expired_upto,
                "batches": self.batches,
            }
        )

    def _restore(self) -> None:
        data = self.store.get(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY)
        if data is None:
            return
        cp = orjson.loads(data)
        self._offsets = {int(p): int(o) for p, o in cp["offsets"].items()}
        self._max_ts = {int(p): int(t) for p, t in cp["max_ts"].items()}
        self._wm = int(cp["watermark"])
        self._late_since = cp["late_since"]
        self._last_early = cp["last_early"]
        self._expired_upto = cp["expired_upto"]
        self.batches = int(cp["batches"])
        if self._wm > NO_WATERMARK:
            self.frames.load_range(self._wm - self._size + 1)
        else:
            self.frames.load_range(-(2**63))
        lo = WINDOW_TAG + encode_i64(-(2**63))
        hi = prefix_upper_bound(WINDOW_TAG)
        for k, v in self.store.scan(ColumnFamily.WINDOW_META, lo, hi):
            w = decode_i64(k, 1)
            key, _ = decode_str(k, 9)
            seq, pending = _WMETA.unpack(v)
            kw = (self.keys.id_of(key), w)
            if pending or w + self._size > self._wm:
                self._wmeta[kw] = _WindowMeta(seq, bool(pending))
            if pending:
                self._late_pending[kw] = None


def _window_any(present: BoolArray, k: int, n_w: int) -> BoolArray:
    """``out[:, i]`` = any of ``present[:, i:i+k]``."""
    cs = np.zeros((present.shape[0], present.shape[1] + 1), dtype=np.int64)
    np.cumsum(present, axis=1, out=cs[:, 1:])
    result: BoolArray = (cs[:, k : k + n_w] - cs[:, 0:n_w]) > 0
    return result


def _raw(message: Any) -> bytes:
    try:
        return orjson.dumps(message)
    except TypeError:
        return repr(message).encode()


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
