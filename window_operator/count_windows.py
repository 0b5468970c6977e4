"""Tuple windows: per-key count windows and per-partition offset windows.

Two window shapes share this operator (``window.type``):

``count`` (the Flink ``countWindow``)
    A key's messages are numbered ``0, 1, 2, ...`` in arrival order (per key, across
    the operator's partitions, in the order the operator receives them). The window
    starting at ``s`` (a multiple of ``step``) holds the key's messages ``[s, s +
    size)``; ``window_start`` / ``window_end`` of a result are these message indices,
    not times. Each key's messages are accumulated into frames of ``step`` messages
    (Jet frames; no event is kept except for full-state operations, whose values go
    to the Message Store) and a window is the combine of its ``size // step`` frames,
    or, with deduct, the previous window minus its trailing frame plus the leading one.

    * Full-size policy: a window is emitted ``ON_TIME`` the moment it holds ``size``
      messages.
    * End of input (``timeout(END_OF_TIME)``): every window that still holds messages
      but is not full is emitted ``ON_TIME`` as it stands, so every message appears in
      the output. Should input continue afterwards, those windows are emitted again
      (``update_seq`` + 1) when they change.
    * Early policy: every ``emit.early`` of wall clock, the open windows that changed
      since the last EARLY emission are emitted ``EARLY``.
    * Arrival order defines the windows, so there are no late arrivals; replays
      (offset <= last applied offset of the partition) are no-ops.
    * Retention: only the frames of open windows are kept. A key has at most ``size
      // step`` of them, held in a ring of that many slots in memory and in the store,
      so a frame is dropped by overwriting its slot: state stays bounded without
      deletes. Past windows are not kept (``get_windows`` shows the open ones).
    * Order-sensitive operations (``first``, ``last``, ``collect``) follow the
      message index, i.e. arrival order; two-input operations (``linreg``) still get
      the event time as ``x``.

``offsets`` (the seed's tuple-based window)
    The window key is the start offset (a multiple of ``step``) and a window covers
    offsets ``[start, start + size)`` of one input partition; results are per
    ``(grouping key, window)`` as for time windows. Offsets act as event time with zero
    lateness: a window is emitted ``ON_TIME`` once the partition has delivered an
    offset ``>= start + size`` (offsets may have gaps, so messages are not counted), or
    at the end of input; EARLY results as for time windows. Windows start at offset 0
    or later (offsets start at 0, so a hopping window reaching below 0 would only
    repeat part of the window at 0). This is the time-window engine
    (:class:`~window_operator.aggregator.WindowedAggregator`) on the offset axis. One
    operator covers **one** partition: results are keyed by ``(key, window_start)``,
    so windows of two partitions would collide in the output; a record of a second
    partition raises :class:`OffsetsPartitionError` (the Spark job runs one task per
    partition).

Store layout of ``count`` windows (a ring per key, key-first)::

    window_meta  b"R" + str(key) + i64(slot) -> frame record of ring slot ``frame % k``
    messages     str(key) + i64(n % (k*step)) -> (n, partition, offset, values)
    checkpoint   b"task"                     -> offsets, early clock, window shape

A frame record is ``version, frame, count, seq, flags, float64 row, object
accumulators``: ``count`` is the key's message count when the record was written (the
largest one is the key's count), ``seq`` the next ``update_seq`` of the window starting
at that frame, and ``flags`` remember which frames changed since the last EARLY and
end-of-input emissions.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from stores.keys import decode_i64, decode_str, encode_i64, prefix_upper_bound
from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering, VectorOp
from window_operator.aggregator import StepStats, StoredWindow, WindowedAggregator
from window_operator.aggset import AggregationSet
from window_operator.config import CountWindow, OffsetsWindow
from window_operator.events import EventBatch, RecordDecoder, RecordRejected
from window_operator.kernel import CHECKPOINT_KEY, InputPosition
from window_operator.keytable import KeyTable
from window_operator.policies import END_OF_TIME, NO_WATERMARK, EmitPolicy, LateMode
from window_operator.positions import assign_offsets, fresh_mask
from window_operator.results import ErrorRecord, Kind, ResultBatch, WindowResult
from window_operator.windows import TimeWindowing

__all__ = [
    "CountWindowAggregator",
    "IncompatibleStateError",
    "OffsetsPartitionError",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_CHECKPOINT_KEY = CHECKPOINT_KEY
_RING_TAG = b"R"
_RECORD_VERSION = 1
_LEN = struct.Struct(">I")
_MSG_HEAD = struct.Struct(">qqq")
_FLAG_EARLY = 1
_FLAG_UNFINAL = 2
#: Deduct-or-recombine cost model, in units of one row of gather + combine (~20 ns):
#: the fixed cost of a vectorized gather + combine call, and of one deduct wavefront
#: step (about ten NumPy calls), as measured on the hot path.
_COMBINE_CALL_ROWS = 175
_DEDUCT_STEP_ROWS = 1250
#: Numeric column that carries the event time into the offsets engine (its ``ts`` is
#: the offset there); the NUL keeps it apart from any input field.
_EVENT_TIME = "\x00event_time"


class IncompatibleStateError(ValueError):
    """The task store holds state of another window shape than the configured one."""


class OffsetsPartitionError(ValueError):
    """An offsets-window operator received records of a second input partition."""


# ---------------------------------------------------------------------------- helpers


def _excl_cumsum(lengths: IntArray) -> IntArray:
    """Start of each run when runs of ``lengths`` are laid end to end."""
    out = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


def _ragged_arange(lengths: IntArray) -> IntArray:
    """``concatenate([arange(n) for n in lengths])`` without the Python loop."""
    total = int(lengths.sum())
    starts = _excl_cumsum(lengths)
    result: IntArray = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    return result


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


def _encode_values(values: Sequence[Any]) -> bytes:
    """Message Store payload; numbers as raw float64 so that infinities survive."""
    if all(v is None or type(v) is float for v in values):
        row = np.array([np.nan if v is None else v for v in values], dtype="<f8")
        return b"d" + row.tobytes()
    return b"j" + orjson.dumps(list(values))


def _decode_values(data: bytes) -> list[Any]:
    if data[:1] == b"d":
        return [_plain(v) for v in np.frombuffer(data, dtype="<f8", offset=1).tolist()]
    values: list[Any] = orjson.loads(data[1:])
    return values


def _single_event_batch(
    key: str,
    ts: int,
    numeric: Mapping[str, float],
    objects: Mapping[str, Any],
    partition: int,
    offset: int | None,
    wall_ms: int | None,
) -> EventBatch:
    return EventBatch(
        keys=[key],
        ts=np.array([ts], dtype=np.int64),
        partition=np.array([partition], dtype=np.int64),
        offset=np.array([-1 if offset is None else offset], dtype=np.int64),
        numeric={f: np.array([v], dtype=np.float64) for f, v in numeric.items()},
        objects={f: [v] for f, v in objects.items()},
        wall_ms=None if wall_ms is None else np.array([wall_ms], dtype=np.int64),
    )


@dataclass(frozen=True, slots=True)
class _PendingMessage:
    """A full-state message waiting for the next flush (Message Store)."""

    kid: int
    n: int
    partition: int
    offset: int
    values: tuple[Any, ...]


class _Engine(Protocol):
    """What the two window shapes implement below the record-decoding facade."""

    @property
    def batches(self) -> int: ...

    @property
    def watermark(self) -> int: ...

    @property
    def offsets(self) -> dict[int, int]: ...

    def add_columns(self, batch: EventBatch) -> StepStats: ...

    def mark_consumed(self, partition: int, offset: int) -> None: ...

    def timeout(self, now_ms: int) -> None: ...

    def take_result_batches(self) -> list[ResultBatch]: ...

    def get_errors(self) -> list[ErrorRecord]: ...

    def flush(self, *, commit: bool) -> StoreBatch: ...

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]: ...


# ---------------------------------------------------------------------------- ring state


class _Ring:
    """The open frames of every key: ``k`` slots per key, frame ``f`` in slot ``f % k``.

    At message count ``c`` a key's open windows start at frames ``> c // step - k``,
    so the frames ``c // step - k + 1 .. c // step`` are all that is needed; the slot
    of ``c // step`` always holds that frame (empty when ``c`` is a multiple of step).
    Vector accumulators are one ``(keys, k, width)`` array; object accumulators a
    flat list indexed ``kid * k + slot``.
    """

    def __init__(self, aggs: AggregationSet, k: int, step: int) -> None:
        self.aggs = aggs
        self.k = k
        self.step = step
        cap = 64
        self.count: IntArray = np.zeros(cap, dtype=np.int64)
        self.acc: FloatArray = np.empty((cap, k, aggs.width), dtype=np.float64)
        self.acc[:] = aggs.identity
        self.seq: IntArray = np.zeros((cap, k), dtype=np.int64)
        self.early: BoolArray = np.zeros((cap, k), dtype=np.bool_)
        self.unfinal: BoolArray = np.zeros((cap, k), dtype=np.bool_)
        self.dirty: BoolArray = np.zeros((cap, k), dtype=np.bool_)
        self.objs: list[list[Any]] = (
            [aggs.create_objects() for _ in range(cap * k)] if aggs.objects else []
        )
        self.pending: list[_PendingMessage] = []

    def ensure(self, n_keys: int) -> None:
        """Grow every array to hold at least ``n_keys`` keys."""
        cap = len(self.count)
        if n_keys <= cap:
            return
        new = max(2 * cap, n_keys)
        extra = new - cap
        k, aggs = self.k, self.aggs
        self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int64)])
        grown = np.empty((extra, k, aggs.width), dtype=np.float64)
        grown[:] = aggs.identity
        self.acc = np.concatenate([self.acc, grown])
        self.seq = np.concatenate([self.seq, np.zeros((extra, k), dtype=np.int64)])
        for name in ("early", "unfinal", "dirty"):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros((extra, k), dtype=np.bool_)]))
        if aggs.objects:
            self.objs.extend(aggs.create_objects() for _ in range(extra * k))

    def frames_held(self, kids: IntArray, slots: IntArray) -> IntArray:
        """The frame each ``(kid, slot)`` holds: the newest one ``<= count // step`` there."""
        top = self.count[kids] // self.step
        result: IntArray = top - np.mod(top - slots, self.k)
        return result

    def reset(self, kids: IntArray, frames: IntArray) -> None:
        """Start empty frames (their slot's previous frame is no longer needed)."""
        if not len(kids):
            return
        slots = frames % self.k
        self.acc[kids, slots] = self.aggs.identity
        self.seq[kids, slots] = 0
        self.early[kids, slots] = False
        self.unfinal[kids, slots] = False
        self.dirty[kids, slots] = True
        if self.aggs.objects:
            for i in (kids * self.k + slots).tolist():
                self.objs[i] = self.aggs.create_objects()

    # -- persistence ---------------------------------------------------------------------

    def _record_dtype(self) -> np.dtype[Any]:
        return np.dtype(
            [
                ("v", "u1"),
                ("frame", ">i8"),
                ("count", ">i8"),
                ("seq", ">i8"),
                ("flags", "u1"),
                ("acc", "<f8", (self.aggs.width,)),
            ]
        )

    def persist(self, batch: StoreBatch, keys: KeyTable[str]) -> None:
        """Write dirty slots and pending messages into ``batch``.

        Every record carries the key's message count: whenever the count changes, the
        slot of frame ``count // step`` changes too, so the largest count among a key's
        records is its count, without a record of its own to write.
        """
        k = self.k
        enc = keys.encoded
        kids, slots = np.nonzero(self.dirty)
        if len(kids):
            kids = kids.astype(np.int64)
            slots = slots.astype(np.int64)
            rec = np.zeros(len(kids), dtype=self._record_dtype())
            rec["v"] = _RECORD_VERSION
            rec["frame"] = self.frames_held(kids, slots)
            rec["count"] = self.count[kids]
            rec["seq"] = self.seq[kids, slots]
            rec["flags"] = (
                self.early[kids, slots].astype(np.uint8) * _FLAG_EARLY
                + self.unfinal[kids, slots].astype(np.uint8) * _FLAG_UNFINAL
            )
            rec["acc"] = self.acc[kids, slots]
            width = rec.dtype.itemsize
            data = rec.tobytes()
            suffix = [encode_i64(j) for j in range(k)]
            store_keys = [
                _RING_TAG + enc[kid] + suffix[s]
                for kid, s in zip(kids.tolist(), slots.tolist(), strict=True)
            ]
            values = [data[i : i + width] for i in range(0, len(data), width)]
            if self.aggs.objects:
                flat = (kids * k + slots).tolist()
                values = [
                    self._with_objects(v, self.objs[i]) for v, i in zip(values, flat, strict=True)
                ]
            batch.put_many(ColumnFamily.WINDOW_META, store_keys, values)
            self.dirty[kids, slots] = False
        ring_messages = k * self.step
        for m in self.pending:
            batch.put(
                ColumnFamily.MESSAGES,
                enc[m.kid] + encode_i64(m.n % ring_messages),
                _MSG_HEAD.pack(m.n, m.partition, m.offset) + _encode_values(m.values),
            )
        self.pending.clear()

    def _with_objects(self, head: bytes, objs: list[Any]) -> bytes:
        parts = [head]
        for j, (_, op) in enumerate(self.aggs.objects):
            if not op.full_state:
                payload = op.dumps(objs[j])
                parts.append(_LEN.pack(len(payload)))
                parts.append(payload)
        return b"".join(parts)

    def restore(self, store: TaskStore, keys: KeyTable[str]) -> None:
        """Load counts, ring slots and full-state messages written by :meth:`persist`."""
        dtype = self._record_dtype()
        records: list[tuple[int, int, bytes]] = []
        # The scan's upper bound must outlive the iterator (rocksdict borrows it).
        ring_end = prefix_upper_bound(_RING_TAG)
        for key_bytes, value in store.scan(ColumnFamily.WINDOW_META, _RING_TAG, ring_end):
            name, pos = decode_str(key_bytes, 1)
            kid = keys.id_of(name)
            self.ensure(kid + 1)
            count = int(np.frombuffer(value, dtype=dtype, count=1)[0]["count"])
            self.count[kid] = max(int(self.count[kid]), count)
            records.append((kid, decode_i64(key_bytes, pos), value))
        for kid, slot, value in records:
            self._load_slot(kid, slot, value, dtype)
        if self.aggs.full_state:
            self._load_messages(store, keys)

    def _load_slot(self, kid: int, slot: int, value: bytes, dtype: np.dtype[Any]) -> None:
        head = np.frombuffer(value, dtype=dtype, count=1)[0]
        if int(head["v"]) != _RECORD_VERSION:
            raise IncompatibleStateError(f"unknown count-window frame record version {head['v']}")
        frame = int(head["frame"])
        held = int(self.frames_held(np.array([kid]), np.array([slot]))[0])
        if frame != held:
            raise IncompatibleStateError(
                f"ring slot {slot} of key {kid} holds frame {frame}, expected {held}: the "
                "store is inconsistent; rebuild it from the changelog or a fresh state dir"
            )
        self.acc[kid, slot] = head["acc"]
        self.seq[kid, slot] = int(head["seq"])
        flags = int(head["flags"])
        self.early[kid, slot] = bool(flags & _FLAG_EARLY)
        self.unfinal[kid, slot] = bool(flags & _FLAG_UNFINAL)
        if self.aggs.objects:
            objs = self.objs[kid * self.k + slot] = self.aggs.create_objects()
            pos = dtype.itemsize
            for j, (_, op) in enumerate(self.aggs.objects):
                if op.full_state:
                    continue
                (length,) = _LEN.unpack_from(value, pos)
                pos += _LEN.size
                objs[j] = op.loads(value[pos : pos + length])
                pos += length

    def _load_messages(self, store: TaskStore, keys: KeyTable[str]) -> None:
        k, step = self.k, self.step
        full = self.aggs.full_state
        ops = self.aggs.objects
        for key_bytes, value in store.scan(ColumnFamily.MESSAGES, b""):
            kid = keys.id_of(decode_str(key_bytes, 0)[0])
            n, part, off = _MSG_HEAD.unpack_from(value)
            count = int(self.count[kid])
            first_open = max(count // step - k + 1, 0) * step
            if not first_open <= n < count:
                continue  # a message of a dropped frame whose ring position was not reused
            objs = self.objs[kid * k + (n // step) % k]
            order = Ordering(n, part, off)
            values = _decode_values(value[_MSG_HEAD.size :])
            for j, v in zip(full, values, strict=True):
                objs[j] = ops[j][1].accumulate(objs[j], v, order)


# ---------------------------------------------------------------------------- count engine


@dataclass(frozen=True, slots=True)
class _Numbered:
    """A batch's accepted events numbered per key and grouped per (key, frame).

    Touched keys (``ukid``, ascending) have counts ``c0`` before and ``c1`` after the
    batch; groups are ordered by (key, frame) and every frame between a key's first
    and last group has one (messages are consecutive).
    """

    n: IntArray  # message index of each event (input order)
    groups: IntArray  # group of each event (input order)
    g_kid: IntArray
    g_frame: IntArray
    g_key: IntArray  # index into ukid of each group
    ukid: IntArray
    c0: IntArray
    c1: IntArray
    first_group: IntArray  # first group of each touched key


class _KeyCountWindows:
    """``type: count``: windows over each key's message sequence."""

    def __init__(
        self,
        window: CountWindow,
        aggs: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        use_deduct: bool | None,
    ) -> None:
        self.window = window
        self.aggs = aggs
        self.policy = policy
        self.store = store
        self.use_deduct = use_deduct
        self._size = window.size
        self._step = window.step
        self._k = window.size // window.step
        self.keys: KeyTable[str] = KeyTable()
        self.ring = _Ring(aggs, self._k, self._step)
        # checkpointed
        self._offsets: dict[int, int] = {}
        self._last_early: int | None = None
        self._ended = False
        self.batches = 0
        self._now = NO_WATERMARK
        self._results: list[ResultBatch] = []
        self._restore()

    @property
    def watermark(self) -> int:
        """Count windows have no event-time watermark: ``END_OF_TIME`` once input ended."""
        return END_OF_TIME if self._ended else NO_WATERMARK

    @property
    def offsets(self) -> dict[int, int]:
        """Last applied offset per input partition."""
        return dict(self._offsets)

    # -- input ---------------------------------------------------------------------------

    def add_columns(self, batch: EventBatch) -> StepStats:
        """Number, accumulate and fire; replays are skipped."""
        n = len(batch)
        if n == 0:
            return StepStats()
        part = batch.partition
        off = assign_offsets(self._offsets, part, batch.offset)
        fresh = fresh_mask(self._offsets, part, off)
        idx = np.flatnonzero(fresh)
        if len(idx):
            self._apply(batch, idx, off)
            for p in np.unique(part[idx]).tolist():
                self._offsets[p] = max(
                    self._offsets.get(p, -1), int(off[idx][part[idx] == p].max())
                )
        if batch.wall_ms is not None and len(batch.wall_ms):
            self._now = max(self._now, int(batch.wall_ms.max()))
        return StepStats(applied=len(idx), replayed=n - len(idx))

    def mark_consumed(self, partition: int, offset: int) -> None:
        """Record that ``offset`` of ``partition`` was handled outside the operator."""
        if offset > self._offsets.get(partition, -1):
            self._offsets[partition] = offset

    def _apply(self, batch: EventBatch, idx: IntArray, off: IntArray) -> None:
        every = len(idx) == len(batch)
        keys = batch.keys if every else [batch.keys[i] for i in idx.tolist()]
        kids = self.keys.ids_of(keys)
        self.ring.ensure(len(self.keys.names))
        num = self._number(kids)
        numeric = batch.numeric if every else {f: v[idx] for f, v in batch.numeric.items()}
        ts = batch.ts if every else batch.ts[idx]
        n_groups = len(num.g_kid)
        merged = self.aggs.identity_rows(n_groups)
        ring = self.ring
        f0 = num.c0 // self._step
        merged[num.first_group] = ring.acc[num.ukid, f0 % self._k]
        if self.aggs.width:
            partial = self.aggs.accumulate(numeric, ts, num.groups, n_groups)
            merged = self.aggs.combine(merged, partial)
        g_objs = self._merge_objects(batch, idx, off, num) if self.aggs.objects else []
        self._fire(num, merged, g_objs)
        self._write_back(num, merged, g_objs)

    def _number(self, kids: IntArray) -> _Numbered:
        """Message indices per key (arrival order) and (key, frame) groups."""
        m = len(kids)
        # a stable sort keeps each key's events in arrival order
        sort_kids = kids.astype(np.int16) if len(self.keys.names) < 2**15 else kids
        order = np.argsort(sort_kids, kind="stable")
        sk = kids[order]
        new_key = np.ones(m, dtype=np.bool_)
        new_key[1:] = sk[1:] != sk[:-1]
        key_start = np.flatnonzero(new_key)
        ukid = sk[key_start]
        per_key = np.diff(np.append(key_start, m))
        c0 = self.ring.count[ukid]
        n_sorted = np.repeat(c0, per_key) + _ragged_arange(per_key)
        f_sorted = n_sorted // self._step
        new_group = new_key.copy()
        new_group[1:] |= f_sorted[1:] != f_sorted[:-1]
        g_start = np.flatnonzero(new_group)
        gid_sorted = np.cumsum(new_group, dtype=np.int64) - 1
        groups = np.empty(m, dtype=np.int64)
        groups[order] = gid_sorted
        n = np.empty(m, dtype=np.int64)
        n[order] = n_sorted
        key_of_sorted = np.cumsum(new_key, dtype=np.int64) - 1
        return _Numbered(
            n=n,
            groups=groups,
            g_kid=sk[g_start],
            g_frame=f_sorted[g_start],
            g_key=key_of_sorted[g_start],
            ukid=ukid,
            c0=c0,
            c1=c0 + per_key,
            first_group=gid_sorted[key_start],
        )

    def _merge_objects(
        self, batch: EventBatch, idx: IntArray, off: IntArray, num: _Numbered
    ) -> list[list[Any]]:
        """Object accumulators per group: the ring's for a key's current frame, else new."""
        aggs, ring, k = self.aggs, self.ring, self._k
        g_objs = [aggs.create_objects() for _ in range(len(num.g_kid))]
        slots = (num.c0 // self._step) % k
        for g, flat in zip(num.first_group.tolist(), (num.ukid * k + slots).tolist(), strict=True):
            g_objs[g] = ring.objs[flat]  # accumulated in place, as frames are
        ops = aggs.objects
        fields = [agg.field for agg, _ in ops]
        cols = [
            [None] * len(batch)
            if f is None
            else batch.objects[f]
            if f in batch.objects
            else batch.numeric[f].tolist()
            for f in fields
        ]
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
                ring.pending.append(
                    _PendingMessage(
                        kid_of_group[g], n, part_l[i], off_l[i], tuple(values[o] for o in full)
                    )
                )
        return g_objs

    # -- full-size policy ------------------------------------------------------------------

    def _fire(self, num: _Numbered, merged: FloatArray, g_objs: list[list[Any]]) -> None:
        """Emit ON_TIME every window that became full in this batch."""
        step, k = self._step, self._k
        f0 = num.c0 // step
        f1 = num.c1 // step
        if k == 1:
            # tumbling: a frame is a window, and a key's frames below c1 // step are full
            fired = np.flatnonzero(num.g_frame < f1[num.g_key])
            if not len(fired):
                return
            kids = num.g_kid[fired]
            frames = num.g_frame[fired]
            existed = frames == f0[num.g_key[fired]]
            seqs = np.where(existed, self.ring.seq[kids, 0], 0)
            objs = [g_objs[g] for g in fired.tolist()] if self.aggs.objects else None
            self._emit(Kind.ON_TIME, kids, frames, seqs, merged[fired], objs)
            return
        # Window ends (in frames) in (f0, f1] and >= k; the first starts at r_lo.
        r_lo = np.maximum(f0 - k + 1, 0)
        n_win = np.maximum(f1 - np.maximum(f0 + 1, k) + 1, 0)
        firing = np.flatnonzero(n_win > 0)
        if not len(firing):
            return
        rows, row_objs, seg_start = self._frame_rows(num, firing, r_lo, merged, g_objs)
        nw = n_win[firing]
        w_off = _ragged_arange(nw)
        w_row = np.repeat(seg_start, nw) + w_off
        kids = np.repeat(num.ukid[firing], nw)
        frames = np.repeat(r_lo[firing], nw) + w_off
        existed = frames <= np.repeat(f0[firing], nw)
        seqs = np.where(existed, self.ring.seq[kids, frames % k], 0)
        values = self._slide(rows, seg_start, nw, w_row)
        objs = None
        if self.aggs.objects:
            objs = [self._combine_objects(row_objs[r : r + k]) for r in w_row.tolist()]
        self._emit(Kind.ON_TIME, kids, frames, seqs, values, objs)

    def _frame_rows(
        self,
        num: _Numbered,
        firing: IntArray,
        r_lo: IntArray,
        merged: FloatArray,
        g_objs: list[list[Any]],
    ) -> tuple[FloatArray, list[list[Any]], IntArray]:
        """Each firing key's frames from its first firing window on, laid end to end.

        A key's run is its older ring frames ``[r_lo, f0)`` followed by its groups
        (frames ``f0 .. (c1 - 1) // step``); returns the rows, their object
        accumulators and where each key's run starts.
        """
        k, step = self._k, self._step
        ring = self.ring
        f0 = (num.c0 // step)[firing]
        n_ring = f0 - r_lo[firing]
        n_grp = (num.c1[firing] - 1) // step - f0 + 1
        seg_start = _excl_cumsum(n_ring + n_grp)
        total = int((n_ring + n_grp).sum())
        rows = np.empty((total, self.aggs.width), dtype=np.float64)
        ring_off = _ragged_arange(n_ring)
        ring_pos = np.repeat(seg_start, n_ring) + ring_off
        ring_kid = np.repeat(num.ukid[firing], n_ring)
        ring_slot = (np.repeat(r_lo[firing], n_ring) + ring_off) % k
        rows[ring_pos] = ring.acc[ring_kid, ring_slot]
        grp_off = _ragged_arange(n_grp)
        grp_pos = np.repeat(seg_start + n_ring, n_grp) + grp_off
        grp_idx = np.repeat(num.first_group[firing], n_grp) + grp_off
        rows[grp_pos] = merged[grp_idx]
        row_objs: list[list[Any]] = []
        if self.aggs.objects:
            row_objs = [[] for _ in range(total)]
            for p, flat in zip(ring_pos.tolist(), (ring_kid * k + ring_slot).tolist(), strict=True):
                row_objs[p] = ring.objs[flat]
            for p, g in zip(grp_pos.tolist(), grp_idx.tolist(), strict=True):
                row_objs[p] = g_objs[g]
        return rows, row_objs, seg_start

    def _slide(
        self, rows: FloatArray, seg_start: IntArray, nw: IntArray, w_row: IntArray
    ) -> FloatArray:
        """Window values: ``k`` consecutive rows combined, or Jet's deduct wavefront."""
        aggs, k = self.aggs, self._k
        if not aggs.width:
            return np.empty((len(w_row), 0), dtype=np.float64)
        depth = int(nw.max())
        n_keys, n_windows = len(nw), len(w_row)
        if self.use_deduct is None:
            # Deduct touches fewer rows but takes one step per window of the busiest key.
            recombine = (k - 1) * (_COMBINE_CALL_ROWS + n_windows)
            wave = (
                (k - 1) * (_COMBINE_CALL_ROWS + n_keys)
                + (depth - 1) * _DEDUCT_STEP_ROWS
                + 3 * (n_windows - n_keys)
            )
            deduct = aggs.deductible and wave < recombine
        else:
            deduct = self.use_deduct
        if not deduct:
            out = rows[w_row]
            for j in range(1, k):
                out = aggs.combine(out, rows[w_row + j])
            return out
        # Jet: the next window of a key is the previous one minus its trailing frame
        # plus the new leading frame; all keys advance together.
        run = rows[seg_start]
        for j in range(1, k):
            run = aggs.combine(run, rows[seg_start + j])
        first_out = _excl_cumsum(nw)
        out = np.empty((n_windows, aggs.width), dtype=np.float64)
        out[first_out] = run
        for i in range(1, depth):
            sel = np.flatnonzero(nw > i)
            at = seg_start[sel] + i
            step_run = aggs.combine(aggs.deduct(run[sel], rows[at - 1]), rows[at + k - 1])
            run[sel] = step_run
            out[first_out[sel] + i] = step_run
        return out

    def _combine_objects(self, frames: Sequence[list[Any]]) -> list[Any]:
        acc = self.aggs.create_objects()
        for objs in frames:
            acc = self.aggs.combine_objects(acc, objs)
        return acc

    def _write_back(self, num: _Numbered, merged: FloatArray, g_objs: list[list[Any]]) -> None:
        """Store the still-open frames in the ring and start the next empty frame."""
        ring, step, k = self.ring, self._step, self._k
        f0 = num.c0 // step
        f1 = num.c1 // step
        keep = np.flatnonzero(num.g_frame >= f1[num.g_key] - k + 1)
        kids = num.g_kid[keep]
        slots = num.g_frame[keep] % k
        ring.acc[kids, slots] = merged[keep]
        born = num.g_frame[keep] > f0[num.g_key[keep]]
        ring.seq[kids[born], slots[born]] = 0
        ring.early[kids, slots] = True
        ring.unfinal[kids, slots] = True
        ring.dirty[kids, slots] = True
        if self.aggs.objects:
            for flat, g in zip((kids * k + slots).tolist(), keep.tolist(), strict=True):
                ring.objs[flat] = g_objs[g]
        ring.count[num.ukid] = num.c1
        boundary = num.c1 % step == 0
        ring.reset(num.ukid[boundary], f1[boundary])

    # -- open windows (EARLY, end of input, inspection) --------------------------------------

    def _open_windows(self, kids: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Every open window holding messages: (kid, start frame, last frame with data)."""
        count = self.ring.count[kids]
        last = (count - 1) // self._step  # -1 for a key without messages
        lo = np.maximum(count // self._step - self._k + 1, 0)
        n_open = np.maximum(last - lo + 1, 0)
        off = _ragged_arange(n_open)
        return (
            np.repeat(kids, n_open),
            np.repeat(lo, n_open) + off,
            np.repeat(last, n_open),
        )

    def _open_values(
        self, kids: IntArray, starts: IntArray, last: IntArray
    ) -> tuple[FloatArray, list[list[Any]] | None]:
        ring, k = self.ring, self._k
        acc = self.aggs.identity_rows(len(kids))
        objs: list[list[Any]] | None = None
        if self.aggs.objects:
            objs = [self.aggs.create_objects() for _ in range(len(kids))]
        for j in range(k):
            frame = starts + j
            have = np.flatnonzero(frame <= last)
            if not len(have):
                break
            slot = frame[have] % k
            if self.aggs.width:
                acc[have] = self.aggs.combine(acc[have], ring.acc[kids[have], slot])
            if objs is not None:
                for i, flat in zip(have.tolist(), (kids[have] * k + slot).tolist(), strict=True):
                    objs[i] = self.aggs.combine_objects(objs[i], ring.objs[flat])
        return acc, objs

    def _contains_marked(
        self, kids: IntArray, starts: IntArray, last: IntArray, flag: BoolArray
    ) -> BoolArray:
        """Which windows hold a frame marked in ``flag``."""
        marked = np.zeros(len(kids), dtype=np.bool_)
        for j in range(self._k):
            frame = starts + j
            marked |= (frame <= last) & flag[kids, frame % self._k]
        return marked

    def _emit_open(self, kind: Kind, flag: BoolArray) -> None:
        """Emit the open windows that contain a frame marked in ``flag``."""
        n_keys = len(self.keys.names)
        cand = np.flatnonzero(flag[:n_keys].any(axis=1)).astype(np.int64)
        if not len(cand):
            return
        kids, starts, last = self._open_windows(cand)
        sel = np.flatnonzero(self._contains_marked(kids, starts, last, flag))
        kids, starts, last = kids[sel], starts[sel], last[sel]
        if not len(kids):
            return
        acc, objs = self._open_values(kids, starts, last)
        slots = starts % self._k
        seqs = self.ring.seq[kids, slots].copy()
        self.ring.seq[kids, slots] += 1
        self.ring.dirty[kids, slots] = True
        self._emit(kind, kids, starts, seqs, acc, objs)

    def _emit(
        self,
        kind: Kind,
        kids: IntArray,
        frames: IntArray,
        seqs: IntArray,
        acc: FloatArray,
        objs: list[list[Any]] | None,
    ) -> None:
        names = self.keys.names
        starts = frames.astype(np.int64) * self._step
        self._results.append(
            ResultBatch(
                kind=kind,
                keys=[names[i] for i in kids.tolist()],
                window_start=starts,
                window_end=starts + self._size,
                update_seq=seqs.astype(np.int64),
                values=self.aggs.finish(acc, objs),
            )
        )

    # -- timers ------------------------------------------------------------------------------

    def timeout(self, now_ms: int) -> None:
        """EARLY results every ``early_period``; at ``END_OF_TIME`` the partial windows."""
        ring = self.ring
        if now_ms >= END_OF_TIME:
            self._emit_open(Kind.ON_TIME, ring.unfinal)
            # both flags change: persist them so a restored operator does not repeat this
            ring.dirty |= ring.unfinal | ring.early
            ring.unfinal[:] = False
            ring.early[:] = False
            self._ended = True
            return
        self._now = max(self._now, now_ms)
        period = self.policy.early_period
        if period is None:
            return
        if self._last_early is None:
            self._last_early = self._now
        elif self._now >= self._last_early + period:
            self._emit_open(Kind.EARLY, ring.early)
            ring.dirty |= ring.early
            ring.early[:] = False
            self._last_early = self._now

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results."""
        out, self._results = self._results, []
        return out

    def get_errors(self) -> list[ErrorRecord]:
        """The engine itself rejects nothing (no late data, no retention errors)."""
        return []

    # -- persistence ---------------------------------------------------------------------------

    def flush(self, *, commit: bool) -> StoreBatch:
        """Dirty slots, counts, messages and the checkpoint in one batch."""
        batch = StoreBatch()
        self.ring.persist(batch, self.keys)
        self.batches += 1
        batch.put(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY, self._checkpoint_bytes())
        if commit:
            self.store.commit(batch)
        return batch

    def _shape(self) -> dict[str, Any]:
        return {"type": "count", "size": self._size, "step": self._step}

    def _checkpoint_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "window": self._shape(),
                "offsets": {str(p): o for p, o in self._offsets.items()},
                "last_early": self._last_early,
                "ended": self._ended,
                "batches": self.batches,
            }
        )

    def _restore(self) -> None:
        data = self.store.get(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY)
        if data is None:
            return
        cp = orjson.loads(data)
        if cp.get("window") != self._shape():
            raise IncompatibleStateError(
                f"the state in {self.store.path} was written by window {cp.get('window')}, "
                f"not {self._shape()}: restore it with its own config or start from an "
                "empty state dir"
            )
        self._offsets = {int(p): int(o) for p, o in cp["offsets"].items()}
        self._last_early = cp["last_early"]
        self._ended = bool(cp["ended"])
        self.batches = int(cp["batches"])
        self.ring.restore(self.store, self.keys)

    # -- inspection -------------------------------------------------------------------------

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Open windows of ``key`` overlapping messages ``[start, end)`` (partial values)."""
        kid = self.keys.ids.get(key)
        if kid is None:
            return []
        kids, starts, last = self._open_windows(np.array([kid], dtype=np.int64))
        sel = np.flatnonzero(
            (starts * self._step < end) & (starts * self._step + self._size > start)
        )
        if not len(sel):
            return []
        kids, starts, last = kids[sel], starts[sel], last[sel]
        acc, objs = self._open_values(kids, starts, last)
        values = self.aggs.finish(acc, objs)
        names = list(values)
        # emitted at the end of input and unchanged since
        fired = self._ended & ~self._contains_marked(kids, starts, last, self.ring.unfinal)
        return [
            StoredWindow(
                key=key,
                window_start=int(w) * self._step,
                window_end=int(w) * self._step + self._size,
                values={n: values[n][j] for n in names},
                fired=bool(fired[j]),
            )
            for j, w in enumerate(starts.tolist())
        ]


# ---------------------------------------------------------------------------- offsets engine


def _event_time_as_x(aggs: AggregationSet) -> AggregationSet:
    """The same aggregations reading the event time from :data:`_EVENT_TIME` as ``x``.

    The offsets engine puts the offset in the ``ts`` column; two-input operations
    without an ``x`` field must still see the event time.
    """
    return AggregationSet(
        [
            replace(a, x_field=_EVENT_TIME)
            if isinstance(a.op, VectorOp) and a.x_field is None
            else a
            for a in aggs.aggregations
        ]
    )


class _OffsetWindows:
    """``type: offsets``: the time-window engine with the offset as event time."""

    def __init__(
        self,
        window: OffsetsWindow,
        aggs: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        use_deduct: bool | None,
    ) -> None:
        data = store.get(ColumnFamily.CHECKPOINT, _CHECKPOINT_KEY)
        if data is not None and "window" in orjson.loads(data):
            raise IncompatibleStateError(
                f"the state in {store.path} was written by count windows, not offsets "
                "windows: start from an empty state dir"
            )
        # Offsets of one partition only grow: no lateness, nothing late, and a window
        # is never needed after it fired.
        inner_policy = EmitPolicy(
            early_period=policy.early_period, late_mode=LateMode.OFF, retention=0
        )
        self._inner = WindowedAggregator(
            windowing=TimeWindowing(window.size, window.step),
            aggregations=_event_time_as_x(aggs),
            policy=inner_policy,
            store=store,
            use_deduct=use_deduct,
        )
        parts = sorted(pos.partition for pos in self._inner.offsets)
        if len(parts) > 1:
            raise IncompatibleStateError(
                f"the state in {store.path} holds partitions {parts}; offsets windows "
                "hold exactly one (was it written by another window type?)"
            )
        self._partition: int | None = parts[0] if parts else None

    @property
    def batches(self) -> int:
        """Flushes so far."""
        return self._inner.batches

    @property
    def watermark(self) -> int:
        """The highest offset delivered (windows ending at or before it have fired)."""
        return self._inner.watermark

    @property
    def offsets(self) -> dict[int, int]:
        """Last applied offset of the operator's partition."""
        return {pos.partition: o for pos, o in self._inner.offsets.items()}

    def _claim(self, partitions: Sequence[int]) -> None:
        """Take the partition of the first record; refuse any other (before any change)."""
        held = self._partition if self._partition is not None else partitions[0]
        other = [p for p in partitions if p != held]
        if other:
            raise OffsetsPartitionError(
                f"offsets windows cover one input partition: this operator holds partition "
                f"{held} and got records of partition {other[0]}. Run one operator (task) "
                "per partition, as the Spark job does"
            )
        self._partition = held

    def add_columns(self, batch: EventBatch) -> StepStats:
        """Re-time the batch by offset and hand it to the window engine."""
        if not len(batch):
            return StepStats()
        self._claim(np.unique(batch.partition).tolist())
        off = assign_offsets(self.offsets, batch.partition, batch.offset)
        numeric = dict(batch.numeric)
        numeric[_EVENT_TIME] = batch.ts.astype(np.float64)
        return self._inner.add_batch(
            EventBatch(
                keys=batch.keys,
                ts=off,
                partition=batch.partition,
                offset=off,
                numeric=numeric,
                objects=batch.objects,
                wall_ms=batch.wall_ms,
            )
        )

    def mark_consumed(self, partition: int, offset: int) -> None:
        """Record a handled offset (of the operator's one partition)."""
        self._claim([partition])
        self._inner.mark_consumed(partition, offset)

    def timeout(self, now_ms: int) -> None:
        """EARLY timers; ``END_OF_TIME`` fires the remaining windows."""
        self._inner.timeout(now_ms)

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results (windows starting at offset >= 0)."""
        return [b for b in map(_from_offset_zero, self._inner.take_result_batches()) if len(b)]

    def get_errors(self) -> list[ErrorRecord]:
        """Records the engine rejected (none are expected: offsets are never late)."""
        return self._inner.get_errors()

    def flush(self, *, commit: bool) -> StoreBatch:
        """Frames and checkpoint in one batch; fired windows expire."""
        return self._inner.flush(commit=commit)

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` overlapping offsets ``[start, end)``."""
        return [w for w in self._inner.get_windows(key, start, end) if w.window_start >= 0]


def _from_offset_zero(batch: ResultBatch) -> ResultBatch:
    """Drop hopping windows that start before offset 0.

    Offsets start at 0, so such a window only repeats part of the window at 0, and an
    offset window's key (its start offset) should be an offset.
    """
    keep = batch.window_start >= 0
    if keep.all():
        return batch
    idx = np.flatnonzero(keep)
    rows = idx.tolist()
    return ResultBatch(
        kind=batch.kind,
        keys=[batch.keys[i] for i in rows],
        window_start=batch.window_start[idx],
        window_end=batch.window_end[idx],
        update_seq=batch.update_seq[idx],
        values={name: [col[i] for i in rows] for name, col in batch.values.items()},
    )


# ---------------------------------------------------------------------------- the operator


class CountWindowAggregator:
    """A task's ``count`` or ``offsets`` window aggregation over RocksDB (see module doc).

    ``use_deduct``: ``True`` slides hopping windows by deduct (Jet), ``False`` combines
    every frame, ``None`` picks per call whichever is cheaper (deductible operations
    only).
    """

    def __init__(
        self,
        *,
        window: CountWindow,
        aggregations: AggregationSet,
        policy: EmitPolicy,
        store: TaskStore,
        decoder: RecordDecoder | None = None,
        use_deduct: bool | None = None,
    ) -> None:
        if use_deduct and not aggregations.deductible:
            raise ValueError("use_deduct=True but not every aggregation has deduct")
        self.window = window
        self.aggs = aggregations
        self.store = store
        self.decoder = decoder
        self._engine: _Engine
        if isinstance(window, OffsetsWindow):
            self._engine = _OffsetWindows(window, aggregations, policy, store, use_deduct)
        else:
            self._engine = _KeyCountWindows(window, aggregations, policy, store, use_deduct)
        self._errors: list[ErrorRecord] = []

    @property
    def watermark(self) -> int:
        """Offsets: the highest offset delivered; count: ``END_OF_TIME`` after the input ended."""
        return self._engine.watermark

    @property
    def offsets(self) -> dict[InputPosition, int]:
        """Last applied offset per input partition."""
        return {InputPosition(0, p): o for p, o in sorted(self._engine.offsets.items())}

    @property
    def batches(self) -> int:
        """How many flushes the store has seen."""
        return self._engine.batches

    def add_batch(self, batch: EventBatch | Sequence[Mapping[str, Any]]) -> StepStats:
        """Add many messages (columns, or records decoded with the job's decoder)."""
        if isinstance(batch, EventBatch):
            return self._engine.add_columns(batch)
        if self.decoder is None:
            raise ValueError("add_batch of records needs a RecordDecoder")
        decoded = self.decoder.decode_records(list(batch))
        self._errors.extend(decoded.errors)
        stats = self._engine.add_columns(decoded.batch)
        return replace(stats, rejected=stats.rejected + len(decoded.errors))

    def add_message(
        self,
        message: Mapping[str, Any],
        *,
        partition: int = 0,
        offset: int | None = None,
        wall_ms: int | None = None,
    ) -> StepStats:
        """Add one record: a batch of one."""
        if self.decoder is None:
            raise ValueError("add_message needs a RecordDecoder (build the operator from a job)")
        last = self._engine.offsets.get(partition, -1)
        if offset is not None and offset <= last:
            return StepStats(replayed=1)
        try:
            event = self.decoder.decode_one(message)
        except RecordRejected as rej:
            off = last + 1 if offset is None else offset
            self._engine.mark_consumed(partition, off)
            self._errors.append(ErrorRecord(rej.code, rej.reason, partition, off, _raw(message)))
            return StepStats(rejected=1)
        return self._engine.add_columns(
            _single_event_batch(
                event.key, event.ts, event.numeric, event.objects, partition, offset, wall_ms
            )
        )

    def mark_consumed(self, partition: int, offset: int, *, source: int = 0) -> None:
        """Record that ``offset`` of ``partition`` was handled outside (e.g. rejected)."""
        self._engine.mark_consumed(partition, offset)

    def timeout(self, now_ms: int) -> None:
        """Run the wall-clock policies; :data:`END_OF_TIME` ends the input."""
        self._engine.timeout(now_ms)

    def take_result_batches(self) -> list[ResultBatch]:
        """Hand over the pending results in columnar form."""
        return self._engine.take_result_batches()

    def get_result(self) -> list[WindowResult]:
        """Hand over (and forget) every window result produced so far."""
        out: list[WindowResult] = []
        for b in self.take_result_batches():
            out.extend(b.to_results())
        return out

    def get_errors(self) -> list[ErrorRecord]:
        """Hand over (and forget) the rejected input records."""
        out, self._errors = self._errors + self._engine.get_errors(), []
        return out

    def flush(self, *, commit: bool = True) -> StoreBatch:
        """Persist state and checkpoint atomically; return the writes.

        With ``commit=False`` the writes are returned but not applied (the caller logs
        and commits them); if it cannot, it must discard this operator and reopen.
        """
        return self._engine.flush(commit=commit)

    def close(self) -> None:
        """Flush and close the store (a second call does nothing)."""
        if self.store.closed:
            return
        self.flush()
        self.store.close()

    def get_windows(self, key: str, start: int, end: int) -> list[StoredWindow]:
        """Stored windows of ``key`` overlapping ``[start, end)`` (message indices or offsets)."""
        return self._engine.get_windows(key, start, end)
