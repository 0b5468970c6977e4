"""The join operator of one task: takes both inputs' messages, joins them on arrival,
emits matches and outer-join rows, and persists state and checkpoint per flush.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from stores.keys import MIN_I64, ts_range
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.join.cache import Codec, SideCache, expand, fit_codec
from window_operator.join.common import (
    EMPTY,
    LEFT,
    MAX_OFFSET,
    MAX_PARTITION,
    POSITION_BITS,
    RIGHT,
    IntArray,
    ObjArray,
    obj_array,
)
from window_operator.join.decoding import JoinDecoder, JoinRows
from window_operator.join.keys import KeyTable
from window_operator.join.layouts import MSG_TAG, StoreLayout
from window_operator.join.meta import SweepIndex, WindowFrames
from window_operator.join.outer import OuterRow, OuterRows
from window_operator.join.progress import InputProgress
from window_operator.join.queries import JoinQueries
from window_operator.join.reads import MessageReader
from window_operator.join.results import JoinKind, JoinResult, JoinResultBatch, JoinStats
from window_operator.join.rows import RowsWindows
from window_operator.join.spec import JoinSpec
from window_operator.join.writes import PendingMessages
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "DEFAULT_CACHE_MAX_ROWS",
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

_CHECKPOINT_KEY = b"join"


class JoinOperator(JoinQueries):
    """A task's windowed join of two inputs over one RocksDB store.

    ``add_batch`` / ``add_message`` take messages of one input (named by ``source``);
    results accumulate until :meth:`take_result_batches` / :meth:`get_result`, rejected
    records until :meth:`get_errors`. :meth:`flush` writes new messages, window
    metadata, outer-join state, expiry and the checkpoint (offsets, watermark) in one
    WriteBatch. Opening an operator over an existing store restores it.

    ``cache_slack_ms`` / ``cache_max_rows`` bound the in-memory message cache (how far
    behind the watermark's reach it keeps messages, and how many); ``key_limit`` is how
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
        key_limit: int = DEFAULT_KEY_LIMIT,
    ) -> None:
        if cache_slack_ms < 0 or cache_max_rows < 0 or key_limit < 0:
            raise ValueError("cache_slack_ms, cache_max_rows and key_limit must be >= 0")
        self.spec = spec
        self.store = store
        self.decoders = decoders
        self.cache_slack_ms = cache_slack_ms
        self.cache_max_rows = cache_max_rows
        self._side_of = {spec.left: LEFT, spec.right: RIGHT}
        self._topics = (spec.left_topic or spec.left, spec.right_topic or spec.right)
        self._keys = KeyTable(spec.on)
        self._reader = MessageReader(store, spec.layout, self._keys)
        self._codec: Codec | None = None
        self._cache = (SideCache(), SideCache())
        self._pending = (PendingMessages(), PendingMessages())
        self._outer = (OuterRows(LEFT, spec), OuterRows(RIGHT, spec))
        self._rows = RowsWindows()
        self._frames = WindowFrames(spec.frame_ms)
        self._sweep = SweepIndex(spec.sweep_ms)
        self.key_limit = key_limit
        self._key_limit = key_limit
        # checkpointed (with the offsets and event times of the progress)
        self._progress = InputProgress(spec.idle_timeout, spec.allowed_lateness)
        self._wm = NO_WATERMARK
        self._seq = 0
        self._stored_max: list[int | None] = [None, None]
        self._expired = [MIN_I64, MIN_I64]
        self.batches = 0
        # outputs
        self._results: list[JoinResultBatch] = []
        self._errors: list[ErrorRecord] = []
        self._restore()

    # ------------------------------------------------------------------ properties

    @property
    def watermark(self) -> int:
        """The join's watermark: min over both inputs, never decreasing."""
        return self._wm

    @property
    def offsets(self) -> dict[tuple[str, int], int]:
        """Last applied offset per ``(source, partition)``."""
        names = self.spec.names
        return {(names[s], p): o for (s, p), o in sorted(self._progress.offsets.items())}

    @property
    def now(self) -> int:
        """The latest wall clock seen (messages and :meth:`timeout`)."""
        return self._progress.now

    # ------------------------------------------------------------------ public API

    def add_batch(
        self,
        source: str,
        events: JoinRows | Sequence[Mapping[str, Any]],
        *,
        partitions: Sequence[int] | IntArray | None = None,
        offsets: Sequence[int] | IntArray | None = None,
        wall_ms: Sequence[int] | IntArray | None = None,
        partition: int = 0,
    ) -> JoinStats:
        """Add messages of one input: decoded :class:`JoinRows`, or records (dicts).

        For records, ``partitions`` / ``offsets`` (``-1``: next) / ``wall_ms`` give each
        record's metadata (default: ``partition``, the next offsets, no wall clock).
        Replays (an offset not above the last applied one of its partition) are no-ops.
        Retention is decided with the watermark as it stood before the batch.
        """
        side = self.side_of(source)
        if isinstance(events, JoinRows):
            if partitions is not None or offsets is not None or wall_ms is not None:
                raise ValueError("JoinRows carry their own partition/offset/wall_ms columns")
            return self._add_rows(side, events)
        if self.decoders is None:
            raise ValueError("add_batch of records needs decoders (build the operator from a job)")
        n = len(events)
        part = (
            np.full(n, partition, dtype=np.int64)
            if partitions is None
            else np.asarray(partitions, dtype=np.int64)
        )
        off = np.full(n, -1, dtype=np.int64) if offsets is None else np.asarray(offsets, np.int64)
        off = self._progress.assign_offsets(side, part, off)
        fresh = self._progress.fresh_mask(side, part, off)
        idx = np.flatnonzero(fresh)
        il = idx.tolist()
        wall = None if wall_ms is None else np.asarray(wall_ms, dtype=np.int64)[idx]
        decoded = self.decoders[side].decode_records(
            events if len(il) == n else [events[i] for i in il],
            partitions=part[idx],
            offsets=off[idx],
            wall_ms=wall,
        )
        stats = self._add_rows(side, decoded.rows)
        # Rejected records were handled: a replay must not reject them again.
        for err in decoded.errors:
            assert err.partition is not None and err.offset is not None
            self._progress.mark(side, err.partition, err.offset)
        self._errors.extend(decoded.errors)
        return JoinStats(
            stats.applied,
            stats.replayed + n - len(il),
            stats.rejected + len(decoded.errors),
            stats.late,
            stats.matches,
        )

    def add_message(
        self,
        source: str,
        record: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> JoinStats:
        """Add one record of ``source`` (a batch of one)."""
        return self.add_batch(
            source,
            [record],
            partitions=[partition],
            offsets=[-1 if offset is None else offset],
            wall_ms=None if wall_ms is None else [wall_ms],
        )

    def mark_consumed(self, source: str, partition: int, offset: int) -> None:
        """Record that ``offset`` of ``source``/``partition`` was handled outside."""
        self._progress.mark(self.side_of(source), partition, offset)

    def timeout(self, now_ms: int) -> None:
        """Advance the wall clock; :data:`END_OF_TIME` ends both inputs."""
        if now_ms >= END_OF_TIME:
            self._progress.now = END_OF_TIME
            self._advance_watermark(END_OF_TIME)
            return
        self._progress.note_now(now_ms)
        if self.spec.idle_timeout is not None:
            self._advance_watermark(self._progress.coalesced_watermark())

    def get_result(self) -> list[JoinResult]:
        """Hand over (and forget) every join result produced so far."""
        return [r for b in self.take_result_batches() for r in b.to_results()]

    def take_result_batches(self) -> list[JoinResultBatch]:
        """Hand over the pending results in columnar form (the hot-path variant)."""
        out, self._results = self._results, []
        return out

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        out, self._errors = self._errors, []
        return out

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint atomically; expire and evict; return the writes.

        With ``commit=False`` the writes are returned but not applied: the caller logs
        and commits them itself. Memory already reflects them, so if the caller cannot
        commit it must discard this operator and reopen the store.
        """
        batch = StoreBatch()
        for side in (LEFT, RIGHT):
            self._pending[side].write(side, self.spec.layout, self._keys.encoded, batch)
        for outer in self._outer:
            outer.write(batch, self._keys.encoded)
        self._frames.write(batch)
        self._sweep.write(batch)
        if NO_WATERMARK < self._wm < END_OF_TIME:
            for side in (LEFT, RIGHT):
                self._expire(side, batch)
        # after the puts: a left row trimmed from a rows window may be staged in them
        for key in self._rows.deletes:
            batch.delete(ColumnFamily.MESSAGES, key)
        self._rows.deletes = []
        self.batches += 1
        batch.put(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY, self._checkpoint_bytes())
        if commit:
            self.store.commit(batch)
        self._evict()
        if len(self._keys) > self._key_limit:
            self._compact_keys()
        return batch

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        if self.store.closed:
            return
        self.flush()
        self.store.close()

    # ------------------------------------------------------------------ batch path

    def _add_rows(self, side: int, rows: JoinRows) -> JoinStats:
        n = len(rows)
        if n == 0:
            return JoinStats()
        progress = self._progress
        part = rows.partition
        if int(part.min()) < 0 or int(part.max()) > MAX_PARTITION:
            raise ValueError(f"partitions must be in [0, {MAX_PARTITION}]")
        off = progress.assign_offsets(side, part, rows.offset)
        if int(off.max()) > MAX_OFFSET:
            raise ValueError(f"offsets must be at most {MAX_OFFSET}")
        fresh = progress.fresh_mask(side, part, off)
        replayed = int(n - fresh.sum())
        wm_before = self._wm
        ts = rows.ts
        accept = fresh.copy()
        rejected = 0
        if wm_before > NO_WATERMARK:
            too_old = fresh & (ts + self.spec.retention < wm_before)
            if too_old.any():
                for i in np.flatnonzero(too_old).tolist():
                    self._reject_retention(side, rows, i, int(part[i]), int(off[i]), wm_before)
                rejected = int(too_old.sum())
                accept &= ~too_old
        idx = np.flatnonzero(accept)
        matches = 0
        late = 0
        if len(idx):
            pos = (part << POSITION_BITS) | off
            if self.spec.rows is None:
                matches = self._apply_time(side, rows, idx, pos)
            else:
                matches = self._apply_rows(side, rows, idx, pos, wm_before)
            late = int((ts[idx] < wm_before).sum())
            progress.advance_max_ts(side, part[idx], ts[idx])
        progress.advance_offsets(side, part[fresh], off[fresh])
        if rows.wall_ms is not None and fresh.any():
            wall = np.where(rows.wall_ms < 0, ts, rows.wall_ms)
            progress.note_wall(side, part[fresh], wall[fresh])
        self._advance_watermark(progress.coalesced_watermark())
        return JoinStats(len(idx), replayed, rejected, late, matches)

    def _apply_time(self, side: int, rows: JoinRows, idx: IntArray, pos_all: IntArray) -> int:
        """Join accepted messages against the other input, then store them."""
        n_all = len(rows)
        il = idx.tolist()
        full = len(idx) == n_all
        kids = self._keys.ids_of(rows.keys if full else [rows.keys[i] for i in il])
        ts = rows.ts if full else rows.ts[idx]
        pos = pos_all if full else pos_all[idx]
        rec = obj_array(rows.records if full else [rows.records[i] for i in il])
        codec = self._ensure_codec(int(kids.max()), int(ts.min()), int(ts.max()))
        other = 1 - side
        a, b = self.spec.reach(other)
        lo_ts, hi_ts = ts + a, ts + b
        cache = self._cache[other]
        p_idx, slots = EMPTY, EMPTY
        if len(cache):
            lo_c, hi_c = codec.range_codes(kids, lo_ts, hi_ts)
            p_idx, slots = expand(
                np.searchsorted(cache.code, lo_c), np.searchsorted(cache.code, hi_c)
            )
        p_ts, p_pos, p_rec = cache.ts[slots], cache.pos[slots], cache.rec[slots]
        deep = lo_ts < cache.horizon
        if deep.any():
            d_idx, d_ts, d_pos, d_rec = self._reader.deep_matches(
                other, cache, kids, lo_ts, hi_ts, deep
            )
            if len(d_idx):
                p_idx = np.concatenate([p_idx, d_idx])
                p_ts = np.concatenate([p_ts, d_ts])
                p_pos = np.concatenate([p_pos, d_pos])
                p_rec = np.concatenate([p_rec, d_rec])
                order = np.lexsort((p_pos, p_ts, p_idx))
                p_idx, p_ts, p_pos, p_rec = p_idx[order], p_ts[order], p_pos[order], p_rec[order]
        if self.spec.outer(other) and len(p_pos):
            self._matched_outer(other, p_pos)
        if len(p_idx):
            self._emit_matches(side, kids, ts, rec, p_idx, p_ts, p_rec)
        self._cache[side].insert(codec.codes(kids, ts), kids, ts, pos, rec)
        self._stage(side, kids, ts, pos, rec.tolist(), None)
        if self.spec.outer(side):
            matched = np.zeros(len(kids), dtype=np.bool_)
            matched[p_idx] = True
            self._outer[side].register(kids, ts, pos, rec, ~matched)
        return len(p_idx)

    def _apply_rows(
        self, side: int, rows: JoinRows, idx: IntArray, pos_all: IntArray, wm_before: int
    ) -> int:
        """ROWS n PRECEDING: right joins the n latest lefts of its key; left joins all rights."""
        n_rows = self.spec.rows
        assert n_rows is not None
        il = idx.tolist()
        kids = self._keys.ids_of([rows.keys[i] for i in il]).tolist()
        ts = rows.ts[idx].tolist()
        pos = pos_all[idx].tolist()
        recs = [rows.records[i] for i in il]
        seqs = list(range(self._seq + 1, self._seq + 1 + len(il)))
        self._seq += len(il)
        # Partners older than retention are invisible however the deletes were timed.
        floor = wm_before - self.spec.retention if wm_before > NO_WATERMARK else MIN_I64
        p_own, p_ts, p_rec = self._rows.add(
            side, n_rows, floor, kids, ts, pos, recs, seqs, self._keys.encoded
        )
        kid_arr = np.asarray(kids, dtype=np.int64)
        ts_arr = np.asarray(ts, dtype=np.int64)
        self._stage(
            side, kid_arr, ts_arr, np.asarray(pos, np.int64), recs, np.asarray(seqs, np.int64)
        )
        if p_own:
            own_idx = np.asarray(p_own, dtype=np.int64)
            self._emit_matches(
                side,
                kid_arr,
                ts_arr,
                obj_array(recs),
                own_idx,
                np.asarray(p_ts, np.int64),
                obj_array(p_rec),
            )
        return len(p_own)

    def _stage(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        pos: IntArray,
        recs: list[bytes],
        seqs: IntArray | None,
    ) -> None:
        """Queue accepted messages for the Message Store; update window and expiry meta."""
        self._pending[side].add(kids, ts, pos, recs, seqs)
        tmax = int(ts.max())
        prev = self._stored_max[side]
        self._stored_max[side] = tmax if prev is None else max(prev, tmax)
        self._frames.note(side, ts, pos)
        if self.spec.layout is StoreLayout.FIELDS_TS_OFFSET:
            self._sweep.note(side, kids, ts, self._keys.encoded)

    def _reject_retention(
        self, side: int, rows: JoinRows, i: int, partition: int, offset: int, wm: int
    ) -> None:
        ts = int(rows.ts[i])
        self._errors.append(
            ErrorRecord(
                code=ErrorCode.OUT_OF_RETENTION,
                reason=(
                    f"event time {ts} of {self.spec.names[side]!r} is out of retention: more "
                    f"than {self.spec.retention} ms behind the watermark {wm}"
                ),
                partition=partition,
                offset=offset,
                raw=rows.records[i],
                topic=self._topics[side],
            )
        )

    # ------------------------------------------------------------------ emission

    def _emit_matches(
        self,
        side: int,
        kids: IntArray,
        ts: IntArray,
        rec: ObjArray,
        p_idx: IntArray,
        p_ts: IntArray,
        p_rec: ObjArray,
    ) -> None:
        keys = self._keys.json_array()[kids[p_idx]].tolist()
        own, own_ts = rec[p_idx].tolist(), ts[p_idx]
        partner = p_rec.tolist()
        if side == LEFT:
            batch = JoinResultBatch(JoinKind.MATCH, keys, own, partner, own_ts, p_ts)
        else:
            batch = JoinResultBatch(JoinKind.MATCH, keys, partner, own, p_ts, own_ts)
        self._results.append(batch)

    def _matched_outer(self, side: int, positions: IntArray) -> None:
        """Rows of an outer ``side`` that just matched: forget them, retract if emitted."""
        retracted = self._outer[side].matched(positions)
        if retracted:
            self._emit_rows(JoinKind.RETRACT, side, retracted)

    def _emit_rows(self, kind: JoinKind, side: int, rows: list[OuterRow]) -> None:
        keys = [self._keys.json[r.kid] for r in rows]
        recs = [r.rec for r in rows]
        ts = np.asarray([r.ts for r in rows], dtype=np.int64)
        if side == LEFT:
            self._results.append(JoinResultBatch(kind, keys, recs, None, ts, None))
        else:
            self._results.append(JoinResultBatch(kind, keys, None, recs, None, ts))

    def _emit_unmatched(self, wm: int) -> None:
        for side, kind in ((LEFT, JoinKind.LEFT_UNMATCHED), (RIGHT, JoinKind.RIGHT_UNMATCHED)):
            if not self.spec.outer(side):
                continue
            due = self._outer[side].due(wm)
            if due:
                self._emit_rows(kind, side, due)

    def _advance_watermark(self, wm: int) -> None:
        if wm > self._wm:
            self._wm = wm
        if self.spec.kind != "inner":
            # also rows that arrived already past their deadline (late and unmatched)
            self._emit_unmatched(self._wm)

    # ------------------------------------------------------------------ codec and cache

    def _ensure_codec(self, kid_max: int, ts_min: int, ts_max: int) -> Codec:
        c = self._codec
        if c is None or not c.fits(kid_max, ts_min, ts_max):
            c = self._codec = fit_codec(self._cache, len(self._keys), kid_max, ts_min, ts_max)
        return c

    def _evict(self) -> None:
        """Drop flushed messages the watermark's reach has passed (or beyond the cap)."""
        if self.spec.rows is not None or self._wm <= NO_WATERMARK:
            return
        for side in (LEFT, RIGHT):
            a, _ = self.spec.reach(side)
            target = self._wm + a - self.cache_slack_ms if self._wm < END_OF_TIME else END_OF_TIME
            self._cache[side].evict(target, self.cache_max_rows)

    def _compact_keys(self) -> None:
        """Forget join keys that nothing in memory refers to any more."""
        live_parts = [c.kid for c in self._cache]
        live_parts += [st.live_kids() for st in self._outer]
        live_parts += [np.asarray(list(d), np.int64) for d in self._rows.state]
        live = np.unique(np.concatenate(live_parts)) if live_parts else EMPTY
        remap = self._keys.compact(live)
        if self._codec is not None:
            for cache in self._cache:
                cache.recode(self._codec, remap)
        for st in self._outer:
            st.remap(remap)
        self._rows.state = (
            {int(remap[k]): v for k, v in self._rows.state[LEFT].items()},
            {int(remap[k]): v for k, v in self._rows.state[RIGHT].items()},
        )
        # interned keys grow back to twice the live ones before the next compaction
        self._key_limit = max(self.key_limit, 2 * len(self._keys))

    # ------------------------------------------------------------------ persistence

    def _expire(self, side: int, batch: StoreBatch) -> None:
        """Delete what the watermark proves can no longer match (see the package doc)."""
        cut = self.spec.cutoff(side, self._wm)
        if cut <= self._expired[side]:
            return
        layout = self.spec.layout
        if layout is StoreLayout.FIELDS_OFFSET:
            self._rows.expire(side, cut, self.spec.sweep_ms, self._keys.encoded)
        elif layout is StoreLayout.FIELDS_TS_OFFSET:
            self._sweep.expire(side, cut, batch)
        else:
            batch.delete_range(ColumnFamily.MESSAGES, *ts_range(MSG_TAG[side], MIN_I64, cut))
        self._frames.expire(side, cut, batch)
        if self.spec.outer(side):
            self._outer[side].expire(cut, batch)
        self._expired[side] = cut

    def _checkpoint_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "offsets": [[s, p, o] for (s, p), o in sorted(self._progress.offsets.items())],
                "max_ts": [[s, p, t] for (s, p), t in sorted(self._progress.max_ts.items())],
                "watermark": self._wm,
                "seq": self._seq,
                "stored_max": self._stored_max,
                "expired": self._expired,
                "rows_swept": self._rows.swept,
                "batches": self.batches,
            }
        )

    def _restore(self) -> None:
        data = self.store.get(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY)
        if data is None:
            return
        cp = orjson.loads(data)
        self._progress.offsets = {(int(s), int(p)): int(o) for s, p, o in cp["offsets"]}
        self._progress.max_ts = {(int(s), int(p)): int(t) for s, p, t in cp["max_ts"]}
        self._wm = int(cp["watermark"])
        self._seq = int(cp["seq"])
        self._stored_max = [None if t is None else int(t) for t in cp["stored_max"]]
        self._expired = [int(t) for t in cp["expired"]]
        self._rows.swept = [int(t) for t in cp["rows_swept"]]
        self.batches = int(cp["batches"])
        for side in (LEFT, RIGHT):
            top = self._stored_max[side]
            # The cache starts empty: complete only above everything stored.
            self._cache[side].horizon = MIN_I64 if top is None else top + 1
            self._frames.restore(side, self.store)
            self._sweep.restore(side, self.store)
            self._outer[side].restore(self.store, self._keys)
            if self.spec.rows is not None:
                self._rows.restore(side, self.store, self.spec.layout, self._keys)
