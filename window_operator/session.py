"""Session windows for one task: time sessions (Jet) and tuple sessions (Samza).

**Time sessions** (``window.gap``). An event's interval is ``[ts, ts + gap]``; an event
joins every session its interval overlaps, inclusively, and extends it; an event whose
interval bridges two sessions merges them. Two events share a session iff their
timestamps chain with differences ``<= gap``, so out-of-order input ends in exactly the
sessions of sorted input. A session is reported as ``window_start`` = its first event
time and ``window_end`` = its last event time + ``gap``; it closes (ON_TIME) once the
watermark reaches that end (``window_end <= watermark``). A late event that changes a
closed session makes it LATE (per ``emit.late``); one that extends it past the
watermark reopens it, and it fires ON_TIME again at its new end.

**Tuple sessions** (``window.max_idle_messages`` = N). Per partition, a key's session
ends once N offsets of that partition have passed without the key (records handled
outside the operator, :meth:`SessionAggregator.mark_consumed`, count too): arrival
order defines sessions, event time does not. ``window_start`` / ``window_end`` are
*offsets* (the first offset of the session, the last offset + 1). A session is emitted
ON_TIME when it ends and then deleted (nothing can change it any more); every open one
is emitted at :data:`END_OF_TIME`. A key seen in several partitions has separate
sessions per partition (keys normally live in one partition).

Per call (a batch; a single message takes a scalar path with the same semantics):

1. replays (offset <= last applied offset of the partition) are no-ops;
2. with the watermark as it stood *before* the call, events past retention go to the
   error output (time sessions only): kept are events whose own interval ends within
   retention, and events inside the span of a retained session (see ``_retained``);
3. accepted events are sorted per (key, time) and cut into the batch's own sessions,
   pre-aggregated with NumPy, then swept together with the retained sessions of the
   touched keys: every group of touching intervals becomes one session, whose
   accumulators are *combined* (never recomputed from messages);
4. sessions that changed after they closed are marked late; the watermark (or, for
   tuple sessions, the partition offset) advances and every session it passed fires.

Retractions: a result is identified by ``(key, window_start, window_end)``. Whenever a
session is emitted under bounds that differ from what was emitted for it (or for the
sessions merged into it) before, a ``RETRACT`` result with empty ``values`` is emitted
for each superseded identity first, in the same step, carrying the ``update_seq`` of
the result that replaces it. A consumer that keeps the latest record per identity and
deletes on RETRACT therefore only ever holds current sessions. With ``emit.late: off``
closed sessions are never re-emitted, so their superseded identities are not retracted
either. Within a step, results are ordered by ``(window_end, window_start, key hash)``,
which does not depend on memory layout, so a restored operator emits the same output.

Retention: a session whose end + ``retention.time`` <= watermark is forgotten (as
Flink cleans a session up): it takes part in no merge, and an event just after it
starts a new session (which may then overlap it in reported bounds).

State (Window Meta Store, key-first as the seed's session window metadata)::

    b"S" + str(key) + i64(start)                         -> session record
    b"X" + i64(bucket of end) + str(key) + i64(start)    -> b""  (time sessions)
    b"P" + str(key) + i64(start)                         -> b""  (LATE pending)

For tuple sessions ``str(key)`` is followed by ``i64(partition)``. A session record
holds: version, flags (closed, late pending, early pending, emitted, extra), the
reported end, the next ``update_seq``, the last emitted bounds, the accumulator row
(:class:`AggregationSet` layout), then further emitted bounds (after merges) and the
payloads of non-full-state object operations. Full-state operations keep their values
in the Message Store ``str(key) + i64(ts) + i64(partition) + i64(offset)`` (tuple
sessions: ``str(key) + i64(partition) + i64(offset)``), which is keyed by key and time,
not by session, so a merge or extension never moves it. An ON_TIME firing does not
rewrite the record: a record still marked open whose end the watermark has passed is
known to have fired with its current bounds (open sessions are always cached).

The ``X`` records are an expiry and restore index in buckets of event time: a session
record is always indexed under a bucket at or after the bucket of its end (written one
bucket ahead, so a growing session is re-indexed rarely; older entries may be stale and
are checked against the record). Restore loads the sessions of buckets at or after the
watermark's (the open ones) plus the pending ones; expiry range-deletes whole buckets
past retention and only reads the index entries being deleted, never live keys.

Open sessions live in an in-memory write-back cache (one float64 row per session so
batches merge with NumPy) written once per :meth:`SessionAggregator.flush`; closed,
clean sessions are evicted then and read back only when a late event may touch them
(one short range scan of the key's records). Merges happen in memory, in the slot of
the earliest session (whose record key usually stays valid), so the store sees one
put per changed session per flush.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from stores.keys import (
    MAX_I64,
    MIN_I64,
    decode_i64,
    decode_str,
    encode_i64,
    encode_str,
    prefix_upper_bound,
)
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggregator import StepStats, StoredWindow
from window_operator.aggset import AggregationSet
from window_operator.config import SessionWindow
from window_operator.events import DecodedEvent, EventBatch, RecordDecoder, RecordRejected
from window_operator.frames import KeyTable
from window_operator.policies import END_OF_TIME, NO_WATERMARK, EmitPolicy, LateMode
from window_operator.positions import assign_offsets, fresh_mask
from window_operator.results import ErrorCode, ErrorRecord, Kind, ResultBatch, WindowResult

__all__ = ["SessionAggregator"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

SESSION_TAG = b"S"
INDEX_TAG = b"X"
PENDING_TAG = b"P"
_CHECKPOINT_KEY = b"task"
_RECORD_VERSION = 1
_LEN = struct.Struct(">I")
_PAIR = struct.Struct(">qq")
_MIN_I64_BYTES = encode_i64(MIN_I64)
_SIGN = np.uint64(1 << 63)

# Record flags.
_CLOSED = 1
_PENDING = 2
_EARLY = 4
_EMITTED = 8
_EXTRA = 16

#: Index bucket width bounds (ms): a bucket is about one gap, so a session that keeps
#: growing is re-indexed at most about once per gap, and restore reads at most one
#: bucket of already-closed sessions.
_MIN_BUCKET_MS = 1_000
_MAX_BUCKET_MS = 60_000
#: An index entry is written this many buckets ahead of the session's end, so a growing
#: session is re-indexed only every ``1 + _INDEX_HEADROOM`` buckets. Restore and expiry
#: only need "entry bucket >= bucket of the end"; the price is that restore reads, and
#: expiry keeps, that many more buckets of closed sessions.
_INDEX_HEADROOM = 1


def _i64_bytes(values: IntArray) -> bytes:
    """``encode_i64`` of every value, concatenated (8 bytes each)."""
    flipped = values.astype(np.int64, copy=False).view(np.uint64) ^ _SIGN
    return flipped.astype(">u8").tobytes()


def _clamp_i64(x: int) -> int:
    return min(max(x, MIN_I64), MAX_I64)


def _plain(value: Any) -> Any:
    """NaN (the columnar null) back to None for object operations."""
    if isinstance(value, float) and value != value:
        return None
    return value


def _raw(message: Any) -> bytes:
    try:
        return orjson.dumps(message)
    except TypeError:
        return repr(message).encode()


def _order_code(encoded: bytes) -> int:
    """A stable 62-bit code of a session key, so emission order survives a restore."""
    return (zlib.crc32(encoded) << 30) ^ zlib.adler32(encoded)


@dataclass(frozen=True, slots=True)
class _PendingMessage:
    """A full-state message waiting to be written to the Message Store."""

    kid: int
    ts: int
    partition: int
    offset: int
    values: tuple[Any, ...]


# ---------------------------------------------------------------------------- keys


class _SessionKeys:
    """Interns session keys: the grouping key, plus the partition for tuple sessions.

    ``enc[kid]`` is the key's store encoding (``str(key)`` or ``str(key) + i64(p)``),
    ``prefix[kid]`` its session record prefix, ``name[kid]`` the grouping key,
    ``part_arr[kid]`` the partition (0 for time sessions) and ``code[kid]`` a stable
    hash used to order emissions.
    """

    def __init__(self, per_partition: bool) -> None:
        self.per_partition = per_partition
        self.table = KeyTable()
        self._pairs: dict[tuple[int, int], int] = {}
        self._by_enc: dict[bytes, int] = {}
        self.name: list[str] = [] if per_partition else self.table.names
        self.enc: list[bytes] = [] if per_partition else self.table.encoded
        self.prefix: list[bytes] = []
        self.code: IntArray = np.zeros(0, dtype=np.int64)
        self.part_arr: IntArray = np.zeros(0, dtype=np.int64)
        self._parts: list[int] = []

    def __len__(self) -> int:
        return len(self.enc)

    def ids(self, keys: Sequence[str], parts: IntArray) -> IntArray:
        """Session key ids of many events (new ones get the next ids, in first-seen order)."""
        # One dict pass over the batch; only misses go through KeyTable.id_of (the
        # same ids as KeyTable.ids_of, which needs three passes).
        found: list[int | None] = list(map(self.table.ids.get, keys))
        if None in found:
            id_of = self.table.id_of
            for i in [i for i, v in enumerate(found) if v is None]:
                found[i] = id_of(keys[i])
        skid = np.array(found, dtype=np.int64)
        if not self.per_partition:
            out = skid
        else:
            pairs = np.stack([skid, parts.astype(np.int64)])
            upairs, inv = np.unique(pairs, axis=1, return_inverse=True)
            ids = np.fromiter(
                (
                    self._pair_id(k, p)
                    for k, p in zip(upairs[0].tolist(), upairs[1].tolist(), strict=True)
                ),
                dtype=np.int64,
                count=upairs.shape[1],
            )
            out = ids[inv.reshape(-1)]
        self.sync()
        return out

    def id_of(self, key: str, part: int) -> int:
        """The id of one session key (assigned if new)."""
        skid = self.table.ids.get(key)
        if skid is None:
            skid = self.table.id_of(key)
        kid = self._pair_id(skid, part) if self.per_partition else skid
        if kid >= len(self.prefix):
            self.sync()
        return kid

    def id_of_encoded(self, encoded: bytes) -> int:
        """The id of a session key from its store encoding (assigned if new).

        Call :meth:`sync` after interning keys this way, before using the derived columns.
        """
        kid = self._by_enc.get(encoded)
        if kid is not None:
            return kid
        key, pos = decode_str(encoded, 0)
        skid = self.table.id_of(key)
        return self._pair_id(skid, decode_i64(encoded, pos)) if self.per_partition else skid

    def _pair_id(self, skid: int, part: int) -> int:
        kid = self._pairs.get((skid, part))
        if kid is None:
            kid = len(self.enc)
            self._pairs[(skid, part)] = kid
            self.name.append(self.table.names[skid])
            self.enc.append(self.table.encoded[skid] + encode_i64(part))
            self._parts.append(part)
        return kid

    def sync(self) -> None:
        """Derive the per-key columns of the keys interned since the last call (in bulk)."""
        have, n = len(self.prefix), len(self.enc)
        if n == have:
            return
        new = self.enc[have:n]
        self.prefix.extend(SESSION_TAG + e for e in new)
        self._by_enc.update(zip(new, range(have, n), strict=True))
        codes = np.fromiter((_order_code(e) for e in new), dtype=np.int64, count=n - have)
        self.code = np.concatenate([self.code, codes])
        parts = self._parts[have:n] if self.per_partition else [0] * (n - have)
        self.part_arr = np.concatenate([self.part_arr, np.asarray(parts, dtype=np.int64)])


# ---------------------------------------------------------------------------- slots


class _Slots:
    """Cached sessions: parallel arrays indexed by slot (``kid < 0`` = free)."""

    _INT = ("kid", "start", "last", "seq", "em_start", "em_end", "stored_start", "idx_bucket")
    _BOOL = ("emitted", "closed", "pending", "early", "dirty", "stored", "p_stored")

    def __init__(self, width: int) -> None:
        cap = 1024
        self.width = width
        self.kid: IntArray = np.full(cap, -1, dtype=np.int64)
        self.start: IntArray = np.zeros(cap, dtype=np.int64)
        self.last: IntArray = np.zeros(cap, dtype=np.int64)
        self.seq: IntArray = np.zeros(cap, dtype=np.int64)
        self.em_start: IntArray = np.zeros(cap, dtype=np.int64)
        self.em_end: IntArray = np.zeros(cap, dtype=np.int64)
        self.stored_start: IntArray = np.zeros(cap, dtype=np.int64)
        self.idx_bucket: IntArray = np.zeros(cap, dtype=np.int64)
        self.emitted: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.closed: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.pending: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.early: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.dirty: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.stored: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.p_stored: BoolArray = np.zeros(cap, dtype=np.bool_)
        self.acc: FloatArray = np.zeros((cap, width), dtype=np.float64)
        self.objs: list[list[Any] | None] = [None] * cap
        #: Emitted bounds beyond ``em_start/em_end`` (sessions merged after emission).
        self.extra: dict[int, list[tuple[int, int]]] = {}
        self.free: list[int] = list(range(cap - 1, -1, -1))

    def __len__(self) -> int:
        return len(self.kid) - len(self.free)

    def _grow(self, need: int) -> None:
        cap = len(self.kid)
        new_cap = max(cap * 2, cap + need)
        extra = new_cap - cap
        for name in self._INT:
            fill = -1 if name == "kid" else 0
            old: IntArray = getattr(self, name)
            setattr(self, name, np.concatenate([old, np.full(extra, fill, dtype=np.int64)]))
        for name in self._BOOL:
            oldb: BoolArray = getattr(self, name)
            setattr(self, name, np.concatenate([oldb, np.zeros(extra, dtype=np.bool_)]))
        self.acc = np.vstack([self.acc, np.zeros((extra, self.width))])
        self.objs.extend([None] * extra)
        self.free.extend(range(new_cap - 1, cap - 1, -1))

    def allocate(self, n: int) -> IntArray:
        """``n`` free slots (their fields must be set by the caller)."""
        if len(self.free) < n:
            self._grow(n - len(self.free))
        taken = self.free[len(self.free) - n :]
        del self.free[len(self.free) - n :]
        slots = np.asarray(taken, dtype=np.int64)
        for name in self._BOOL:
            getattr(self, name)[slots] = False
        return slots

    def release(self, slots: IntArray) -> None:
        """Free slots."""
        if not len(slots):
            return
        self.kid[slots] = -1
        for name in self._BOOL:
            getattr(self, name)[slots] = False
        sl = slots.tolist()
        for s in sl:
            self.objs[s] = None
            self.extra.pop(s, None)
        self.free.extend(sl)

    def live(self) -> IntArray:
        """Slots holding a session."""
        return np.flatnonzero(self.kid >= 0)

    def of_kids(self, mask: BoolArray) -> IntArray:
        """Live slots whose kid is marked in ``mask`` (one entry per kid)."""
        kid = self.kid
        live = kid >= 0
        out = np.zeros(len(kid), dtype=np.bool_)
        out[live] = mask[kid[live]]
        return np.flatnonzero(out)

    def emitted_bounds(self, slot: int) -> list[tuple[int, int]]:
        """Every identity emitted for this session and not yet retracted."""
        out = [(int(self.em_start[slot]), int(self.em_end[slot]))] if self.emitted[slot] else []
        return out + self.extra.get(slot, [])


@dataclass(frozen=True, slots=True)
class _Decoded:
    """Session records read from the store (not yet in the cache)."""

    kid: IntArray
    start: IntArray
    head: npt.NDArray[Any]
    tails: list[bytes]


# ---------------------------------------------------------------------------- operator


class SessionAggregator:
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
        self.keys = _SessionKeys(per_partition=self.by_offsets)
        self.slots = _Slots(aggregations.width)
        fields: list[Any] = [
            ("version", "u1"),
            ("flags", "u1"),
            ("end", ">i8"),
            ("seq", ">i8"),
            ("em_start", ">i8"),
            ("em_end", ">i8"),
        ]
        if aggregations.width:
            fields.append(("acc", "<f8", (aggregations.width,)))
        self._rec = np.dtype(fields)
        # checkpointed
        self._offsets: dict[int, int] = {}
        self._max_ts: dict[int, int] = {}
        self._wm = NO_WATERMARK
        self._late_since: int | None = None
        self._last_early: int | None = None
        self._expired_upto: int | None = None
        self._max_len = 0
        self._bucket = min(max(self._gap, _MIN_BUCKET_MS), _MAX_BUCKET_MS)
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
        self._messages: list[_PendingMessage] = []
        self._eot = False
        # outputs
        self._results: list[ResultBatch] = []
        self._errors: list[ErrorRecord] = []
        self._restore()

    # ------------------------------------------------------------------ properties

    @property
    def watermark(self) -> int:
        """The event-time watermark (min over active partitions, never decreasing).

        Tuple sessions report it too, but close by offsets.
        """
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

    def mark_consumed(self, partition: int, offset: int) -> None:
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

    def get_result(self) -> list[WindowResult]:
        """Hand over (and forget) every window result produced so far."""
        out: list[WindowResult] = []
        for b in self.take_result_batches():
            out.extend(b.to_results())
        return out

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results in columnar form (RETRACTs before replacements)."""
        out, self._results = self._results, []
        return out

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        out, self._errors = self._errors, []
        return out

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
        batch.put(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY, self._checkpoint_bytes())
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
            lo, hi = prefix + _MIN_I64_BYTES, prefix + encode_i64(_clamp_i64(end))
        found = [(k, v) for k, v in self.store.scan(ColumnFamily.WINDOW_META, lo, hi)]
        if found:
            self._load(self._decode([k for k, _ in found], [v for _, v in found]), self._known)
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

    # ------------------------------------------------------------------ batch path

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
        gap = self._gap
        aggs = self.aggs
        # 1. the batch's own sessions: sort per (key, time), cut where the gap is exceeded
        order = np.lexsort((axis, kids))
        sk, sa = kids[order], axis[order]
        cut = np.ones(len(sk), dtype=np.bool_)
        cut[1:] = (sk[1:] != sk[:-1]) | (sa[1:] - sa[:-1] > gap)
        first = np.flatnonzero(cut)
        b_kid, b_start = sk[first], sa[first]
        b_last = np.append(sa[first[1:] - 1], sa[-1])
        groups = np.empty(len(sk), dtype=np.int64)
        groups[order] = np.cumsum(cut) - 1
        nb = len(first)
        partial = np.empty((nb, aggs.width))
        if aggs.width:
            whole = len(idx) == len(batch)
            numeric = batch.numeric if whole else {f: v[idx] for f, v in batch.numeric.items()}
            partial = aggs.accumulate(numeric, batch.ts[idx], groups, nb)
        b_objs = self._batch_objects(batch, idx, groups, nb, kids, off) if aggs.objects else None
        b_events = np.bincount(groups, minlength=nb)
        # 2. existing sessions of the touched keys (stored ones too, when they may touch)
        cutoff = NO_WATERMARK if self.by_offsets else wm_before - self.policy.retention
        if not self.by_offsets:
            self._load_touching(b_kid, b_start, b_last + gap, cutoff)
        mask = np.zeros(len(self.keys) + 1, dtype=np.bool_)
        mask[b_kid] = True
        sl = self.slots
        ex = sl.of_kids(mask)
        if not self.by_offsets and len(ex):
            # sessions past retention take part in nothing (see _retained)
            ex = ex[sl.last[ex] + gap > cutoff]
        # 3. sweep batch sessions and existing ones together, per key in start order
        ne = len(ex)
        m_kid = np.concatenate([sl.kid[ex], b_kid])
        m_start = np.concatenate([sl.start[ex], b_start])
        m_last = np.concatenate([sl.last[ex], b_last])
        m_src = np.concatenate([ex, np.arange(nb, dtype=np.int64)])
        m_is_ex = np.arange(ne + nb) < ne
        order = np.lexsort((m_start, m_kid))
        m_kid, m_start, m_last = m_kid[order], m_start[order], m_last[order]
        m_src, m_is_ex = m_src[order], m_is_ex[order]
        gid = np.cumsum(_session_breaks(m_kid, m_start, m_last + gap)) - 1
        has_batch = np.zeros(int(gid[-1]) + 1, dtype=np.bool_)
        has_batch[gid[~m_is_ex]] = True
        keep = has_batch[gid]
        m_kid, m_start, m_last = m_kid[keep], m_start[keep], m_last[keep]
        m_src, m_is_ex, gid = m_src[keep], m_is_ex[keep], gid[keep]
        newg = np.ones(len(gid), dtype=np.bool_)
        newg[1:] = gid[1:] != gid[:-1]
        gid = np.cumsum(newg) - 1
        g_first = np.flatnonzero(newg)
        ng = len(g_first)
        g_size = np.diff(np.append(g_first, len(gid)))
        g_kid = m_kid[g_first]
        g_start = m_start[g_first]
        g_last = np.maximum.reduceat(m_last, g_first)
        # 4. the survivor of a group is its earliest existing session: its record key
        # stays valid (unless the batch reaches further back); others are merged in.
        surv = np.full(ng, -1, dtype=np.int64)
        ex_pos = np.flatnonzero(m_is_ex)
        ex_gid = gid[ex_pos]
        u_gid, first_ex = np.unique(ex_gid, return_index=True)
        surv[u_gid] = m_src[ex_pos[first_ex]]
        merged_away = np.ones(len(ex_pos), dtype=np.bool_)
        merged_away[first_ex] = False
        gone = m_src[ex_pos[merged_away]]
        fresh_g = np.flatnonzero(surv < 0)
        if len(fresh_g):
            new_slots = sl.allocate(len(fresh_g))
            surv[fresh_g] = new_slots
            sl.kid[new_slots] = g_kid[fresh_g]
            sl.seq[new_slots] = 0
        if aggs.width:
            rows = np.where(
                m_is_ex[:, None],
                sl.acc[np.where(m_is_ex, m_src, 0)],
                partial[np.where(m_is_ex, 0, m_src)],
            )
            sl.acc[surv] = _reduce_groups(aggs, rows, gid, g_first, g_size)
        if b_objs is not None:
            self._combine_group_objects(surv, m_src, m_is_ex, g_first, g_size, b_objs)
        if len(gone):
            self._absorb(surv, gid[ex_pos[merged_away]], gone)
        # 5. new bounds and state of every touched session
        sl.start[surv] = g_start
        sl.last[surv] = g_last
        sl.dirty[surv] = True
        if self.by_offsets:
            closed = np.zeros(ng, dtype=np.bool_)
        else:
            closed = g_last + gap <= wm_before
        late_on = self.policy.late_mode is not LateMode.OFF
        sl.closed[surv] = closed
        sl.pending[surv] = closed & late_on
        sl.early[surv] = ~closed
        if late_on and closed.any() and self._late_since is None:
            if self.policy.late_mode is LateMode.PERIOD:
                self._late_since = None if self._now <= NO_WATERMARK else self._now
        if not closed.any():
            return 0
        b_group = np.empty(nb, dtype=np.int64)
        batch_pos = np.flatnonzero(~m_is_ex)
        b_group[m_src[batch_pos]] = gid[batch_pos]
        return int(b_events[closed[b_group]].sum())

    def _batch_objects(
        self,
        batch: EventBatch,
        idx: IntArray,
        groups: IntArray,
        nb: int,
        kids: IntArray,
        off: IntArray,
    ) -> list[list[Any]]:
        """Object accumulators of the batch's sessions (and full-state messages to store)."""
        ops = self.aggs.objects
        out = [self.aggs.create_objects() for _ in range(nb)]
        n = len(batch)
        cols = [
            [None] * n
            if agg.field is None
            else batch.objects[agg.field]
            if agg.field in batch.objects
            else batch.numeric[agg.field].tolist()
            for agg, _ in ops
        ]
        full = self.aggs.full_state
        ts_l = batch.ts.tolist()
        part_l = batch.partition.tolist()
        off_l = off.tolist()
        kid_l = kids.tolist()
        grp_l = groups.tolist()
        pending = self._messages
        for j, i in enumerate(idx.tolist()):
            objs = out[grp_l[j]]
            order = Ordering(ts_l[i], part_l[i], off_l[i])
            for o, (_, op) in enumerate(ops):
                objs[o] = op.accumulate(objs[o], _plain(cols[o][i]), order)
            if full:
                values = tuple(_plain(cols[o][i]) for o in full)
                pending.append(_PendingMessage(kid_l[j], ts_l[i], part_l[i], off_l[i], values))
        return out

    def _combine_group_objects(
        self,
        surv: IntArray,
        m_src: IntArray,
        m_is_ex: BoolArray,
        g_first: IntArray,
        g_size: IntArray,
        b_objs: list[list[Any]],
    ) -> None:
        sl = self.slots
        aggs = self.aggs
        src_l = m_src.tolist()
        is_ex_l = m_is_ex.tolist()
        for g, (f, size) in enumerate(zip(g_first.tolist(), g_size.tolist(), strict=True)):
            acc: list[Any] | None = None
            for m in range(f, f + size):
                part = sl.objs[src_l[m]] if is_ex_l[m] else b_objs[src_l[m]]
                assert part is not None
                acc = part if acc is None else aggs.combine_objects(acc, part)
            sl.objs[int(surv[g])] = acc

    def _absorb(self, surv: IntArray, groups: IntArray, gone: IntArray) -> None:
        """Merge the bookkeeping of sessions merged away into their survivors; free them."""
        sl = self.slots
        for g, s in zip(groups.tolist(), gone.tolist(), strict=True):
            t = int(surv[g])
            sl.seq[t] = max(int(sl.seq[t]), int(sl.seq[s]))
            bounds = sl.emitted_bounds(s)
            if bounds:
                if not sl.emitted[t]:
                    sl.emitted[t] = True
                    sl.em_start[t], sl.em_end[t] = bounds[0]
                    bounds = bounds[1:]
                if bounds:
                    sl.extra.setdefault(t, []).extend(bounds)
            if sl.stored[s]:
                self._deletes[(int(sl.kid[s]), int(sl.stored_start[s]))] = bool(sl.p_stored[s])
        sl.release(gone)

    # ------------------------------------------------------------------ single path

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
                keep = bool(self._retained(_one(kid), _one(t), wm_before)[0])
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

    def _apply_one(
        self, event: DecodedEvent, kid: int, t: int, partition: int, offset: int, wm_before: int
    ) -> int:
        """Merge one event into its key's sessions (as :meth:`_apply`); 1 if it was late."""
        gap = self._gap
        sl = self.slots
        aggs = self.aggs
        cutoff = NO_WATERMARK if self.by_offsets else wm_before - self.policy.retention
        if not self.by_offsets:
            reach = int(self._disk_end_of(_one(kid))[0])
            if t <= reach and reach > cutoff:  # the rule of _load_touching, for one event
                self._load_touching(_one(kid), _one(t), _one(t + gap), cutoff)
        touch = [
            s
            for s in np.flatnonzero(sl.kid == kid).tolist()
            # the event's interval [t, t + gap] overlaps the session's [start, last + gap]
            if int(sl.start[s]) <= t + gap
            and int(sl.last[s]) + gap >= t
            and int(sl.last[s]) + gap > cutoff
        ]
        touch.sort(key=lambda s: int(sl.start[s]))
        row = aggs.identity.copy()
        if aggs.width:
            aggs.accumulate_one(row, event.numeric, event.ts)
        if not touch:
            s = int(sl.allocate(1)[0])
            sl.kid[s], sl.start[s], sl.last[s], sl.seq[s] = kid, t, t, 0
            sl.acc[s] = row
            if aggs.objects:
                sl.objs[s] = aggs.create_objects()
        else:
            # the earliest touched session survives; the others are combined into it
            s = touch[0]
            if aggs.width:
                sl.acc[s] = aggs.combine(sl.acc[s : s + 1], row[None, :])[0]
            for o in touch[1:]:
                if aggs.width:
                    sl.acc[s] = aggs.combine(sl.acc[s : s + 1], sl.acc[o : o + 1])[0]
                if aggs.objects:
                    mine, theirs = sl.objs[s], sl.objs[o]
                    assert mine is not None and theirs is not None
                    sl.objs[s] = aggs.combine_objects(mine, theirs)
            start = min(t, int(sl.start[s]))
            last = max(t, *(int(sl.last[o]) for o in touch))
            if len(touch) > 1:
                gone = np.asarray(touch[1:], dtype=np.int64)
                self._absorb(_one(s), np.zeros(len(gone), dtype=np.int64), gone)
            sl.start[s], sl.last[s] = start, last
        if aggs.objects:
            self._accumulate_event_objects(event, s, kid, partition, offset)
        closed = not self.by_offsets and int(sl.last[s]) + gap <= wm_before
        late_on = self.policy.late_mode is not LateMode.OFF
        sl.dirty[s] = True
        sl.closed[s] = closed
        sl.pending[s] = closed and late_on
        sl.early[s] = not closed
        if closed and late_on and self._late_since is None:
            if self.policy.late_mode is LateMode.PERIOD:
                self._late_since = None if self._now <= NO_WATERMARK else self._now
        return int(closed)

    def _accumulate_event_objects(
        self, event: DecodedEvent, slot: int, kid: int, partition: int, offset: int
    ) -> None:
        objs = self.slots.objs[slot]
        assert objs is not None
        order = Ordering(event.ts, partition, offset)
        values: list[Any] = []
        for o, (agg, op) in enumerate(self.aggs.objects):
            if agg.field is None:
                value = None
            elif agg.field in event.objects:
                value = event.objects[agg.field]
            else:
                value = _plain(event.numeric[agg.field])
            values.append(value)
            objs[o] = op.accumulate(objs[o], value, order)
        if self.aggs.full_state:
            full = tuple(values[o] for o in self.aggs.full_state)
            self._messages.append(_PendingMessage(kid, event.ts, partition, offset, full))

    # ------------------------------------------------------------------ stored sessions

    def _disk_end_of(self, kids: IntArray) -> IntArray:
        n = len(self.keys)
        if len(self._disk_end) < n:
            grow = np.full(n - len(self._disk_end), self._disk_end_default, dtype=np.int64)
            self._disk_end = np.concatenate([self._disk_end, grow])
        return self._disk_end[kids]

    def _known(self, kids: Iterable[int]) -> set[tuple[int, int]]:
        """Store identities of the given keys that memory already accounts for."""
        mask = np.zeros(len(self.keys) + 1, dtype=np.bool_)
        mask[np.fromiter(kids, dtype=np.int64)] = True
        sl = self.slots
        cached = sl.of_kids(mask)
        known = set(zip(sl.kid[cached].tolist(), sl.start[cached].tolist(), strict=True))
        st = cached[sl.stored[cached]]
        known.update(zip(sl.kid[st].tolist(), sl.stored_start[st].tolist(), strict=True))
        known.update(self._deletes)
        return known

    def _load_touching(self, q_kid: IntArray, lo: IntArray, hi: IntArray, cutoff: int) -> None:
        """Load stored, uncached, retained sessions with ``start <= hi`` and ``end >= lo``.

        Keys are key-first, so this is one short range scan per key: a session ending at
        or after ``lo`` starts at or after ``lo - gap - max_len``.
        """
        dend = self._disk_end_of(q_kid)
        need = (lo <= dend) & (dend > cutoff)
        if not need.any():
            return
        q_kid, lo, hi = q_kid[need], lo[need], hi[need]
        ranges: dict[int, tuple[int, int]] = {}
        for k, a, b in zip(q_kid.tolist(), lo.tolist(), hi.tolist(), strict=True):
            r = ranges.get(k)
            ranges[k] = (a, b) if r is None else (min(r[0], a), max(r[1], b))
        known = self._known(ranges)
        gap, reach = self._gap, self._gap + self._max_len
        keys: list[bytes] = []
        values: list[bytes] = []
        for k, (a, b) in ranges.items():
            prefix = SESSION_TAG + self.keys.enc[k]
            scan_lo = prefix + encode_i64(_clamp_i64(a - reach))
            scan_hi = prefix + encode_i64(_clamp_i64(b + 1))
            for key, value in self.store.scan(ColumnFamily.WINDOW_META, scan_lo, scan_hi):
                last = _record_end(value) - self._pad
                if last + gap >= a and last + gap > cutoff:
                    keys.append(key)
                    values.append(value)
        if keys:
            self._load(self._decode(keys, values), lambda _: known)

    def _decode(self, keys: Sequence[bytes], values: Sequence[bytes]) -> _Decoded:
        """Parse session records (fixed head vectorized, tails kept as bytes)."""
        size = self._rec.itemsize
        head = np.frombuffer(b"".join(v[:size] for v in values), dtype=self._rec)
        if len(head) and (head["version"] != _RECORD_VERSION).any():
            bad = int(head["version"][head["version"] != _RECORD_VERSION][0])
            raise ValueError(f"unknown session record version {bad}")
        kid = np.fromiter(
            (self.keys.id_of_encoded(k[1:-8]) for k in keys), dtype=np.int64, count=len(keys)
        )
        self.keys.sync()
        start = np.fromiter((decode_i64(k, len(k) - 8) for k in keys), np.int64, len(keys))
        return _Decoded(kid, start, head, [v[size:] for v in values])

    def _load(
        self, rec: _Decoded, known_of: Callable[[set[int]], set[tuple[int, int]]]
    ) -> IntArray:
        """Put decoded records into cache slots, skipping ones memory already accounts for."""
        known: set[tuple[int, int]] = known_of(set(rec.kid.tolist()))
        take = np.fromiter(
            (
                (k, s) not in known
                for k, s in zip(rec.kid.tolist(), rec.start.tolist(), strict=True)
            ),
            dtype=np.bool_,
            count=len(rec.kid),
        )
        idx = np.flatnonzero(take)
        if not len(idx):
            return idx
        sl = self.slots
        slots = sl.allocate(len(idx))
        head = rec.head[idx]
        flags = head["flags"].astype(np.int64)
        sl.kid[slots] = rec.kid[idx]
        sl.start[slots] = rec.start[idx]
        sl.last[slots] = head["end"].astype(np.int64) - self._pad
        sl.seq[slots] = head["seq"]
        sl.em_start[slots] = head["em_start"]
        sl.em_end[slots] = head["em_end"]
        sl.emitted[slots] = (flags & _EMITTED) != 0
        sl.closed[slots] = (flags & _CLOSED) != 0
        sl.pending[slots] = (flags & _PENDING) != 0
        sl.early[slots] = (flags & _EARLY) != 0
        sl.stored[slots] = True
        sl.stored_start[slots] = rec.start[idx]
        sl.p_stored[slots] = sl.pending[slots]
        # a lower bound of the bucket its index entry is in (>= the bucket of its end)
        sl.idx_bucket[slots] = (sl.last[slots] + self._gap) // self._bucket
        if self.aggs.width:
            sl.acc[slots] = head["acc"]
        if self.aggs.objects or bool((flags & _EXTRA).any()):
            for j, (i, s) in enumerate(zip(idx.tolist(), slots.tolist(), strict=True)):
                self._decode_tail(s, int(flags[j]), rec.tails[i])
        if not self.by_offsets:
            self._infer_fired(slots)
        if self.aggs.full_state:
            for s in slots.tolist():
                self._load_messages(s)
        return slots

    def _infer_fired(self, slots: IntArray) -> None:
        """Apply the ON_TIME firing a record was not rewritten for (see :meth:`_fire`).

        Open sessions are always cached and fire as soon as the watermark reaches their
        end, so a record written while open whose end the watermark has passed fired
        exactly once since, with its current bounds, retracting everything else.
        """
        sl = self.slots
        fired = slots[~sl.closed[slots] & (sl.last[slots] + self._gap <= self._wm)]
        if not len(fired):
            return
        sl.seq[fired] += 1
        sl.emitted[fired] = True
        sl.em_start[fired] = sl.start[fired]
        sl.em_end[fired] = sl.last[fired] + self._pad
        sl.closed[fired] = True
        sl.early[fired] = False
        for s in fired.tolist():
            sl.extra.pop(s, None)

    def _decode_tail(self, slot: int, flags: int, tail: bytes) -> None:
        pos = 0
        if flags & _EXTRA:
            (n,) = _LEN.unpack_from(tail, 0)
            pos = 4
            pairs = []
            for _ in range(n):
                pairs.append(_PAIR.unpack_from(tail, pos))
                pos += _PAIR.size
            self.slots.extra[slot] = [(int(a), int(b)) for a, b in pairs]
        if not self.aggs.objects:
            return
        objs = self.aggs.create_objects()
        for j, (_, op) in enumerate(self.aggs.objects):
            if op.full_state:
                continue
            (length,) = _LEN.unpack_from(tail, pos)
            pos += 4
            objs[j] = op.loads(tail[pos : pos + length])
            pos += length
        self.slots.objs[slot] = objs

    def _load_messages(self, slot: int) -> None:
        """Rebuild full-state accumulators of a loaded session from the Message Store."""
        sl = self.slots
        objs = sl.objs[slot]
        assert objs is not None
        kid = int(sl.kid[slot])
        prefix = self.keys.enc[kid]
        lo = prefix + encode_i64(int(sl.start[slot]))
        hi = prefix + encode_i64(int(sl.last[slot]) + 1)
        plen = len(prefix)
        ops = self.aggs.objects
        for k, v in self.store.scan(ColumnFamily.MESSAGES, lo, hi):
            vals = orjson.loads(v)
            if self.by_offsets:
                off = decode_i64(k, plen)
                order = Ordering(int(vals[0]), int(self.keys.part_arr[kid]), off)
                vals = vals[1:]
            else:
                order = Ordering(
                    decode_i64(k, plen), decode_i64(k, plen + 8), decode_i64(k, plen + 16)
                )
            for j, val in zip(self.aggs.full_state, vals, strict=True):
                objs[j] = ops[j][1].accumulate(objs[j], val, order)

    def _objs_of(self, slots: IntArray) -> list[list[Any]] | None:
        if not self.aggs.objects:
            return None
        out: list[list[Any]] = []
        for s in slots.tolist():
            o = self.slots.objs[s]
            assert o is not None
            out.append(o)
        return out

    # ------------------------------------------------------------------ watermark

    def _advance_max_ts(self, part: IntArray, ts: IntArray) -> None:
        for p in np.unique(part).tolist():
            m = int(ts[part == p].max())
            if m > self._max_ts.get(p, NO_WATERMARK):
                self._max_ts[p] = m

    def _note_wall(self, part: IntArray, wall: IntArray) -> None:
        self._now = max(self._now, int(wall.max()))
        for p in np.unique(part).tolist():
            self._last_active[p] = max(
                self._last_active.get(p, NO_WATERMARK), int(wall[part == p].max())
            )

    def _coalesced_watermark(self) -> int:
        """Min over partitions of (max event time - allowed lateness), idle ones excluded."""
        if not self._max_ts:
            return NO_WATERMARK
        idle = self.policy.idle_timeout
        active = [
            ts
            for p, ts in self._max_ts.items()
            if idle is None or self._now < self._last_active.get(p, self._now) + idle
        ]
        if not active:  # every partition idle: the freshest one leads
            active = [max(self._max_ts.values())]
        return min(active) - self.policy.allowed_lateness

    def _advance_watermark(self, wm: int) -> None:
        if wm <= self._wm:
            return
        self._wm = wm
        if self.by_offsets:
            return
        self._fire()
        if wm < END_OF_TIME:
            # A pending LATE update of a session about to leave retention goes out now:
            # deciding by the watermark keeps the output independent of flush timing.
            sl = self.slots
            pend = self._pending_slots()
            due = pend[sl.last[pend] + self._gap <= wm - self.policy.retention]
            if len(due):
                self._emit_late(due)

    # ------------------------------------------------------------------ emission

    def _fire(self) -> None:
        """Emit ON_TIME results for open sessions whose end the watermark has reached."""
        sl = self.slots
        open_ = np.flatnonzero((sl.kid >= 0) & ~sl.closed)
        if not len(open_):
            return
        if self._eot:
            due = open_
        else:
            close_at = sl.last[open_] + self._gap
            if self.by_offsets:
                parts = self.keys.part_arr[sl.kid[open_]]
                up, inv = np.unique(parts, return_inverse=True)
                offs = np.array([self._offsets.get(p, -1) for p in up.tolist()], dtype=np.int64)
                due = open_[close_at <= offs[inv.reshape(-1)]]
            else:
                due = open_[close_at <= self._wm]
        if not len(due):
            return
        # Not marked dirty: a stored record that says "open" although its end is behind
        # the watermark is known to have fired like this (see _load), so the store is
        # not written once more per session just for the bookkeeping.
        self._emit(Kind.ON_TIME, due, dirty=False)
        sl.closed[due] = True
        sl.pending[due] = False
        sl.early[due] = False

    def _pending_slots(self) -> IntArray:
        sl = self.slots
        return np.flatnonzero(sl.pending & (sl.kid >= 0))

    def _emit_late(self, slots: IntArray | None = None) -> None:
        sl = self.slots
        due = self._pending_slots() if slots is None else slots
        if not len(due):
            return
        self._emit(Kind.LATE, due)
        sl.pending[due] = False
        if not self._pending_slots().size:
            self._late_since = None

    def _emit_early(self) -> None:
        sl = self.slots
        due = np.flatnonzero((sl.kid >= 0) & ~sl.closed & sl.early)
        if not len(due):
            return
        self._emit(Kind.EARLY, due)
        sl.early[due] = False

    def _emit(self, kind: Kind, slots: IntArray, *, dirty: bool = True) -> None:
        """Emit sessions (RETRACTs of their superseded identities first) and record it."""
        sl = self.slots
        kids = sl.kid[slots]
        starts = sl.start[slots]
        ends = sl.last[slots] + self._pad
        # a deterministic order (end, start, key) that does not depend on slot or key ids
        order = np.lexsort((self.keys.code[kids], starts, ends))
        slots, kids, starts, ends = slots[order], kids[order], starts[order], ends[order]
        seqs = sl.seq[slots].copy()
        names = self.keys.name
        r_keys: list[str] = []
        r_start: list[int] = []
        r_end: list[int] = []
        r_seq: list[int] = []
        stale = sl.emitted[slots] & ((sl.em_start[slots] != starts) | (sl.em_end[slots] != ends))
        extra = sl.extra
        for j in np.flatnonzero(stale | np.isin(slots, list(extra)) if extra else stale).tolist():
            s = int(slots[j])
            bounds = sl.emitted_bounds(s)
            for a, b in bounds:
                if (a, b) != (int(starts[j]), int(ends[j])):
                    r_keys.append(names[int(kids[j])])
                    r_start.append(a)
                    r_end.append(b)
                    r_seq.append(int(seqs[j]))
            extra.pop(s, None)
        if r_keys:
            self._results.append(
                ResultBatch(
                    kind=Kind.RETRACT,
                    keys=r_keys,
                    window_start=np.asarray(r_start, dtype=np.int64),
                    window_end=np.asarray(r_end, dtype=np.int64),
                    update_seq=np.asarray(r_seq, dtype=np.int64),
                    values={},
                )
            )
        self._results.append(
            ResultBatch(
                kind=kind,
                keys=[names[k] for k in kids.tolist()],
                window_start=starts.copy(),
                window_end=ends,
                update_seq=seqs,
                values=self.aggs.finish(sl.acc[slots], self._objs_of(slots)),
            )
        )
        sl.seq[slots] += 1
        sl.emitted[slots] = True
        sl.em_start[slots] = starts
        sl.em_end[slots] = ends
        if dirty:
            sl.dirty[slots] = True

    # ------------------------------------------------------------------ persistence

    def _persist(self, batch: StoreBatch) -> set[tuple[int, int]]:
        """Write every changed session (and pending messages) into ``batch``.

        Returns the identities of the records this batch deletes because memory
        superseded them (merged away, or the session's start moved).
        """
        sl = self.slots
        superseded = set(self._deletes)
        # Superseded records first, so that a put of the same key later in the batch wins.
        for (kid, start), had_p in self._deletes.items():
            batch.delete(ColumnFamily.WINDOW_META, self._skey(SESSION_TAG, kid, start))
            if had_p:
                batch.delete(ColumnFamily.WINDOW_META, self._skey(PENDING_TAG, kid, start))
        self._deletes.clear()
        slots = np.flatnonzero(sl.dirty & (sl.kid >= 0))
        if len(slots):
            superseded |= self._write_sessions(batch, slots)
        for m in self._messages:
            if self.by_offsets:
                key = self.keys.enc[m.kid] + encode_i64(m.offset)
                value = orjson.dumps([m.ts, *m.values])
            else:
                key = (
                    self.keys.enc[m.kid]
                    + encode_i64(m.ts)
                    + encode_i64(m.partition)
                    + encode_i64(m.offset)
                )
                value = orjson.dumps(list(m.values))
            batch.put(ColumnFamily.MESSAGES, key, value)
        self._messages.clear()
        return superseded

    def _write_sessions(self, batch: StoreBatch, slots: IntArray) -> set[tuple[int, int]]:
        sl = self.slots
        kids = sl.kid[slots]
        starts = sl.start[slots]
        moved = sl.stored[slots] & (sl.stored_start[slots] != starts)
        moved_from: set[tuple[int, int]] = set()
        for j in np.flatnonzero(moved).tolist():
            kid, old = int(kids[j]), int(sl.stored_start[slots[j]])
            moved_from.add((kid, old))
            batch.delete(ColumnFamily.WINDOW_META, self._skey(SESSION_TAG, kid, old))
            if sl.p_stored[slots[j]]:
                batch.delete(ColumnFamily.WINDOW_META, self._skey(PENDING_TAG, kid, old))
        keys = self._skeys(SESSION_TAG, kids, starts)
        batch.put_many(ColumnFamily.WINDOW_META, keys, self._encode(slots))
        pending = sl.pending[slots]
        p_old = sl.p_stored[slots] & ~moved
        p_put = np.flatnonzero(pending & ~p_old)
        p_del = np.flatnonzero(p_old & ~pending)
        if len(p_put):
            batch.put_many(
                ColumnFamily.WINDOW_META,
                self._skeys(PENDING_TAG, kids[p_put], starts[p_put]),
                [b""] * len(p_put),
            )
        for j in p_del.tolist():
            batch.delete(
                ColumnFamily.WINDOW_META, self._skey(PENDING_TAG, int(kids[j]), int(starts[j]))
            )
        if not self.by_offsets:
            bucket = (sl.last[slots] + self._gap) // self._bucket
            need = ~sl.stored[slots] | moved | (sl.idx_bucket[slots] < bucket)
            ix = np.flatnonzero(need)
            if len(ix):
                enc = self.keys.enc
                bucket[ix] += _INDEX_HEADROOM
                sl.idx_bucket[slots[ix]] = bucket[ix]
                bb = _i64_bytes(bucket[ix])
                sb = _i64_bytes(starts[ix])
                ikeys = [
                    INDEX_TAG + bb[8 * j : 8 * j + 8] + enc[k] + sb[8 * j : 8 * j + 8]
                    for j, k in enumerate(kids[ix].tolist())
                ]
                batch.put_many(ColumnFamily.WINDOW_META, ikeys, [b""] * len(ix))
        self._max_len = max(self._max_len, int((sl.last[slots] - starts).max()))
        sl.stored[slots] = True
        sl.stored_start[slots] = starts
        sl.p_stored[slots] = pending
        sl.dirty[slots] = False
        return moved_from

    def _encode(self, slots: IntArray) -> list[bytes]:
        """Session records: the fixed head in one NumPy pass, tails where needed."""
        sl = self.slots
        n = len(slots)
        rec = np.zeros(n, dtype=self._rec)
        flags = (
            sl.closed[slots] * _CLOSED
            + sl.pending[slots] * _PENDING
            + sl.early[slots] * _EARLY
            + sl.emitted[slots] * _EMITTED
        ).astype(np.uint8)
        extra = sl.extra
        has_extra = np.isin(slots, list(extra)) if extra else np.zeros(n, dtype=np.bool_)
        flags[has_extra] |= _EXTRA
        rec["version"] = _RECORD_VERSION
        rec["flags"] = flags
        rec["end"] = sl.last[slots] + self._pad
        rec["seq"] = sl.seq[slots]
        rec["em_start"] = sl.em_start[slots]
        rec["em_end"] = sl.em_end[slots]
        if self.aggs.width:
            rec["acc"] = sl.acc[slots]
        data = rec.tobytes()
        w = self._rec.itemsize
        values = [data[i : i + w] for i in range(0, n * w, w)]
        if self.aggs.objects or has_extra.any():
            tail_at = range(n) if self.aggs.objects else np.flatnonzero(has_extra).tolist()
            for j in tail_at:
                values[j] += self._encode_tail(int(slots[j]))
        return values

    def _encode_tail(self, slot: int) -> bytes:
        parts: list[bytes] = []
        pairs = self.slots.extra.get(slot)
        if pairs:
            parts.append(_LEN.pack(len(pairs)))
            parts.extend(_PAIR.pack(a, b) for a, b in pairs)
        objs = self.slots.objs[slot]
        if objs is not None:
            for j, (_, op) in enumerate(self.aggs.objects):
                if not op.full_state:
                    payload = op.dumps(objs[j])
                    parts.append(_LEN.pack(len(payload)))
                    parts.append(payload)
        return b"".join(parts)

    def _skey(self, tag: bytes, kid: int, start: int) -> bytes:
        return tag + self.keys.enc[kid] + encode_i64(start)

    def _skeys(self, tag: bytes, kids: IntArray, starts: IntArray) -> list[bytes]:
        sb = _i64_bytes(starts)
        if tag == SESSION_TAG:
            pre = self.keys.prefix
            return [pre[k] + sb[8 * j : 8 * j + 8] for j, k in enumerate(kids.tolist())]
        enc = self.keys.enc
        return [tag + enc[k] + sb[8 * j : 8 * j + 8] for j, k in enumerate(kids.tolist())]

    def _ended_tuple_sessions(self) -> IntArray:
        """Tuple sessions that were emitted as ended: nothing can change them any more."""
        if not self.by_offsets:
            return np.zeros(0, dtype=np.int64)
        sl = self.slots
        ended = np.flatnonzero((sl.kid >= 0) & sl.closed)
        sl.dirty[ended] = False
        return ended

    def _drop(self, batch: StoreBatch, slots: IntArray) -> None:
        """Delete sessions and their messages (after this batch's puts) and free them."""
        sl = self.slots
        enc = self.keys.enc
        for s in slots.tolist():
            kid = int(sl.kid[s])
            if sl.stored[s]:
                start = int(sl.stored_start[s])
                batch.delete(ColumnFamily.WINDOW_META, self._skey(SESSION_TAG, kid, start))
                if sl.p_stored[s]:
                    batch.delete(ColumnFamily.WINDOW_META, self._skey(PENDING_TAG, kid, start))
            if self.aggs.full_state:
                end = encode_i64(int(sl.last[s]) + 1)
                batch.delete_range(ColumnFamily.MESSAGES, enc[kid] + _MIN_I64_BYTES, enc[kid] + end)
        sl.release(slots)

    def _expire(self, batch: StoreBatch, superseded: set[tuple[int, int]]) -> None:
        """Delete sessions past retention: whole index buckets, by range delete.

        ``superseded`` are records this batch already deletes: their data lives on in
        another session, so their messages must not be deleted with them.
        """
        wm = self._wm
        if wm <= NO_WATERMARK or wm >= END_OF_TIME:
            return
        cutoff = wm - self.policy.retention
        b_max = (cutoff + 1) // self._bucket - 1
        if self._expired_upto is not None and b_max <= self._expired_upto:
            return
        sl = self.slots
        live = sl.live()
        gone = live[(sl.last[live] + self._gap) // self._bucket <= b_max]
        done = set(superseded)
        if len(gone):
            done.update(zip(sl.kid[gone].tolist(), sl.stored_start[gone].tolist(), strict=True))
            self._drop(batch, gone)
        lo = INDEX_TAG + (
            _MIN_I64_BYTES if self._expired_upto is None else encode_i64(self._expired_upto + 1)
        )
        hi = INDEX_TAG + encode_i64(b_max + 1)
        # Index entries are hints: the record may have moved on (extended, merged).
        cand = dict.fromkeys(k[9:] for k, _ in self.store.scan(ColumnFamily.WINDOW_META, lo, hi))
        if cand:
            rest = list(cand)
            kids = [self.keys.id_of_encoded(r[:-8]) for r in rest]
            self.keys.sync()
            starts = [decode_i64(r, len(r) - 8) for r in rest]
            known = self._known(set(kids)) | done
            todo = [j for j in range(len(rest)) if (kids[j], starts[j]) not in known]
            values = self.store.multi_get(
                ColumnFamily.WINDOW_META, [SESSION_TAG + rest[j] for j in todo]
            )
            enc = self.keys.enc
            for j, v in zip(todo, values, strict=True):
                if v is None:
                    continue
                last = _record_end(v) - self._pad
                if (last + self._gap) // self._bucket > b_max:
                    continue
                batch.delete(ColumnFamily.WINDOW_META, SESSION_TAG + rest[j])
                if v[1] & _PENDING:
                    batch.delete(ColumnFamily.WINDOW_META, PENDING_TAG + rest[j])
                if self.aggs.full_state:
                    prefix = enc[kids[j]]
                    batch.delete_range(
                        ColumnFamily.MESSAGES,
                        prefix + _MIN_I64_BYTES,
                        prefix + encode_i64(last + 1),
                    )
        batch.delete_range(ColumnFamily.WINDOW_META, INDEX_TAG + _MIN_I64_BYTES, hi)
        self._expired_upto = b_max

    def _evict_closed(self) -> None:
        """Free closed, clean sessions (they are in the store); remember how far they reach."""
        sl = self.slots
        cand = np.flatnonzero((sl.kid >= 0) & sl.closed & ~sl.dirty & ~sl.pending)
        if not len(cand):
            return
        kids = sl.kid[cand]
        self._disk_end_of(kids)
        np.maximum.at(self._disk_end, kids, sl.last[cand] + self._gap)
        sl.release(cand)

    def _checkpoint_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "shape": "tuple_session" if self.by_offsets else "session",
                "offsets": {str(p): o for p, o in self._offsets.items()},
                "max_ts": {str(p): t for p, t in self._max_ts.items()},
                "watermark": self._wm,
                "late_since": self._late_since,
                "last_early": self._last_early,
                "expired_upto": self._expired_upto,
                "max_len": self._max_len,
                "bucket_ms": self._bucket,
                "batches": self.batches,
            }
        )

    def _restore(self) -> None:
        data = self.store.get(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY)
        if data is None:
            return
        cp = orjson.loads(data)
        shape = "tuple_session" if self.by_offsets else "session"
        if cp.get("shape") != shape:
            raise ValueError(
                f"the store at {self.store.path} holds {cp.get('shape', 'window')!r} state, "
                f"not {shape!r}: the window shape changed; use a new state directory"
            )
        self._offsets = {int(p): int(o) for p, o in cp["offsets"].items()}
        self._max_ts = {int(p): int(t) for p, t in cp["max_ts"].items()}
        self._wm = int(cp["watermark"])
        self._late_since = cp["late_since"]
        self._last_early = cp["last_early"]
        self._expired_upto = cp["expired_upto"]
        self._max_len = int(cp["max_len"])
        self._bucket = int(cp["bucket_ms"])
        self.batches = int(cp["batches"])
        self._eot = self._wm >= END_OF_TIME
        meta = ColumnFamily.WINDOW_META
        if self.by_offsets:
            # ended tuple sessions are deleted at flush: every stored one is open
            hi = prefix_upper_bound(SESSION_TAG)
            found = list(self.store.scan(meta, SESSION_TAG, hi))
            keys = [k for k, _ in found]
            values: list[bytes | None] = [v for _, v in found]
        else:
            # Scan bounds stay bound to names while iterating: TaskStore.scan hands `end`
            # to RocksDB without a copy, so a temporary bound would be freed mid-scan.
            lo = INDEX_TAG + encode_i64(self._wm // self._bucket)
            hi = prefix_upper_bound(INDEX_TAG)
            rest = dict.fromkeys(k[9:] for k, _ in self.store.scan(meta, lo, hi))
            p_hi = prefix_upper_bound(PENDING_TAG)
            for k, _ in self.store.scan(meta, PENDING_TAG, p_hi):
                rest[k[1:]] = None
            keys = [SESSION_TAG + r for r in rest]
            values = self.store.multi_get(meta, keys)
        present = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        if present:
            rec = self._decode([k for k, _ in present], [v for _, v in present])
            if not self.by_offsets:
                ends = rec.head["end"].astype(np.int64) - self._pad + self._gap
                want = (ends > self._wm) | ((rec.head["flags"] & _PENDING) != 0)
                w = np.flatnonzero(want)
                rec = _Decoded(rec.kid[w], rec.start[w], rec.head[w], [rec.tails[i] for i in w])
            self._load(rec, lambda _: set())
        # every stored session that was not loaded ended at or before the watermark
        self._disk_end_default = self._wm

    # ------------------------------------------------------------------ errors

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


# ---------------------------------------------------------------------------- helpers


def _one(x: int) -> IntArray:
    return np.array([x], dtype=np.int64)


def _record_end(value: bytes) -> int:
    """The reported end stored in a session record (a big-endian i64 after two bytes)."""
    return int.from_bytes(value[2:10], "big", signed=True)


def _session_breaks(kid: IntArray, start: IntArray, reach: IntArray) -> BoolArray:
    """Where a new session begins in intervals sorted by ``(kid, start)``.

    Interval ``i`` continues the current session iff it has the same key and
    ``start[i] <= max(reach[j])`` over the earlier intervals of that session. The
    running max is one ``maximum.accumulate`` over all keys at once: each key's times
    are shifted into a band of its own, above every earlier key's band.
    """
    n = len(kid)
    first = np.ones(n, dtype=np.bool_)
    first[1:] = kid[1:] != kid[:-1]
    seg = np.flatnonzero(first)
    seg_len = np.diff(np.append(seg, n))
    kmin = start[seg]
    span = np.maximum.reduceat(reach - np.repeat(kmin, seg_len), seg) + 1
    if float(span.astype(np.float64).sum()) < 2.0**61:
        base = np.concatenate(([0], np.cumsum(span)[:-1]))
        shift = np.repeat(base - kmin, seg_len)
        prev = np.maximum.accumulate(reach + shift)
        brk = first.copy()
        brk[1:] |= start[1:] + shift[1:] > prev[:-1]
        return brk
    brk = first.copy()  # time spans too wide to band: one key at a time
    top = 0
    for i, (k, s, r) in enumerate(zip(first.tolist(), start.tolist(), reach.tolist(), strict=True)):
        if k or s > top:
            brk[i] = True
            top = r
        else:
            top = max(top, r)
    return brk


def _reduce_groups(
    aggs: AggregationSet, rows: FloatArray, gid: IntArray, g_first: IntArray, g_size: IntArray
) -> FloatArray:
    """Combine the rows of each contiguous group: a log-depth tree of vectorized combines."""
    pos = np.arange(len(rows)) - g_first[gid]
    size = g_size[gid]
    step = 1
    top = int(g_size.max())
    while step < top:
        i = np.flatnonzero((pos % (2 * step) == 0) & (pos + step < size))
        rows[i] = aggs.combine(rows[i], rows[i + step])
        step *= 2
    out: FloatArray = rows[g_first]
    return out


def _advance_offsets(offsets: dict[int, int], part: IntArray, off: IntArray) -> None:
    for p in np.unique(part).tolist():
        m = int(off[part == p].max())
        if m > offsets.get(p, -1):
            offsets[p] = m
