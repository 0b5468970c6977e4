"""Object operations: first, last, collect, count_distinct, median, percentile.

Accumulators are plain Python values; :meth:`dumps` is deterministic (an accumulator
always serializes to the same bytes whatever the order its events were folded or its
frames combined in) and :meth:`loads` restores it exactly.

Order-sensitive operations order by ``Ordering.as_tuple()`` = ``(ts, partition,
offset)``, which identifies a Kafka record, so their results do not depend on the
order in which frames are combined.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar, TypeAlias

import numpy as np
import numpy.typing as npt
import orjson

from window_operator.aggregations.base import ObjectOp, Ordering
from window_operator.jsonbytes import json_bytes

__all__ = [
    "CollectOp",
    "CountDistinctOp",
    "FirstOp",
    "LastOp",
    "MedianOp",
    "PercentileOp",
    "canonical_json",
]

OrderTuple: TypeAlias = tuple[int, int, int]
Entry: TypeAlias = tuple[OrderTuple, Any]
NumEntry: TypeAlias = tuple[OrderTuple, float]

# orjson refuses integers wider than 64 bits, which a stdlib ``json`` decoder can
# produce; such payloads fall back to stdlib json behind this marker byte (no JSON
# document starts with it, so loads can tell the two encodings apart).
_STDLIB_MARKER = b"J"

# Full-state records: little-endian so the bytes are the same on every host.
_ENTRY_DTYPE = np.dtype([("ts", "<i8"), ("partition", "<i8"), ("offset", "<i8"), ("value", "<f8")])


def _json_dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    try:
        return json_bytes(obj, orjson.OPT_SORT_KEYS if sort_keys else 0)
    except orjson.JSONEncodeError:
        text = json.dumps(obj, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
        return _STDLIB_MARKER + text.encode()


def _json_loads(data: bytes) -> Any:
    if data[:1] == _STDLIB_MARKER:
        return json.loads(data[1:])
    return orjson.loads(data)


def canonical_json(value: Any) -> str:
    """The canonical text of a JSON value: compact, object keys sorted.

    Two values are "the same" for ``count_distinct`` iff their canonical texts are
    equal (so ``1`` and ``1.0`` differ, as they do in the JSON text).
    """
    return _json_dumps(value, sort_keys=True).decode()


def _order_of(entry: Entry) -> OrderTuple:
    return entry[0]


# --------------------------------------------------------------------------- first / last


class FirstOp(ObjectOp):
    """The value of the earliest event (smallest ``(ts, partition, offset)``).

    Accumulator ``None`` (no event) or ``(order_tuple, value)``. Null values are kept:
    the first value of a window may legitimately be ``null``.
    """

    op_name: ClassVar[str] = "first"
    numeric: ClassVar[bool] = False
    #: +1 keeps the smallest order, -1 the largest.
    _direction: ClassVar[int] = 1

    def _wins(self, candidate: Entry, current: Entry) -> bool:
        if candidate[0] != current[0]:
            return (candidate[0] < current[0]) == (self._direction > 0)
        # Equal orders only arise from a replayed record; comparing the canonical text
        # keeps the choice independent of combine order even then.
        cand, cur = canonical_json(candidate[1]), canonical_json(current[1])
        return (cand < cur) if self._direction > 0 else (cand > cur)

    def create(self) -> Entry | None:
        """``None``: no event yet."""
        return None

    def accumulate(self, acc: Entry | None, value: Any, order: Ordering) -> Entry | None:
        """Keep ``value`` if it is earlier (later for ``last``) than the current one."""
        entry = (order.as_tuple(), value)
        if acc is None or self._wins(entry, acc):
            return entry
        return acc

    def combine(self, a: Entry | None, b: Entry | None) -> Entry | None:
        """The winner of the two (accumulators are immutable tuples, so no copy)."""
        if a is None:
            return b
        if b is None:
            return a
        return b if self._wins(b, a) else a

    def finish(self, acc: Entry | None) -> Any:
        """The value, or ``None`` for an empty window."""
        return None if acc is None else acc[1]

    def dumps(self, acc: Entry | None) -> bytes:
        """``null`` or ``[ts, partition, offset, value]``."""
        if acc is None:
            return b"null"
        return _json_dumps([*acc[0], acc[1]])

    def loads(self, data: bytes) -> Entry | None:
        """Inverse of :meth:`dumps`."""
        raw = _json_loads(data)
        if raw is None:
            return None
        ts, partition, offset, value = raw
        return ((ts, partition, offset), value)


class LastOp(FirstOp):
    """The value of the latest event (largest ``(ts, partition, offset)``)."""

    op_name: ClassVar[str] = "last"
    _direction: ClassVar[int] = -1


# --------------------------------------------------------------------------- collect


class CollectOp(ObjectOp):
    """All values of the window in event order (nulls included).

    Accumulator: a list of ``(order_tuple, value)`` kept sorted by order tuple.
    """

    op_name: ClassVar[str] = "collect"
    numeric: ClassVar[bool] = False

    def create(self) -> list[Entry]:
        """An empty list."""
        return []

    def accumulate(self, acc: list[Entry], value: Any, order: Ordering) -> list[Entry]:
        """Append (events mostly arrive in order) or insert at the sorted position."""
        entry = (order.as_tuple(), value)
        if not acc or acc[-1][0] <= entry[0]:
            acc.append(entry)
        else:
            bisect.insort_right(acc, entry, key=_order_of)
        return acc

    def combine(self, a: list[Entry], b: list[Entry]) -> list[Entry]:
        """Merge two sorted lists into a new one.

        Timsort detects the two runs, so this is a linear merge.
        """
        return sorted(a + b, key=_order_of)

    def finish(self, acc: list[Entry]) -> list[Any]:
        """The values ordered by ``(ts, partition, offset)``."""
        return [value for _, value in sorted(acc, key=_order_of)]

    def dumps(self, acc: list[Entry]) -> bytes:
        """``[[ts, partition, offset, value], ...]`` in order."""
        return _json_dumps([[*order, value] for order, value in sorted(acc, key=_order_of)])

    def loads(self, data: bytes) -> list[Entry]:
        """Inverse of :meth:`dumps`."""
        return [((ts, p, o), value) for ts, p, o, value in _json_loads(data)]


# --------------------------------------------------------------------------- count_distinct


class CountDistinctOp(ObjectOp):
    """Number of distinct non-null values (compared by :func:`canonical_json`).

    Nulls are not counted, as in SQL ``COUNT(DISTINCT x)``.
    """

    op_name: ClassVar[str] = "count_distinct"
    numeric: ClassVar[bool] = False

    def create(self) -> set[str]:
        """An empty set."""
        return set()

    def accumulate(self, acc: set[str], value: Any, order: Ordering) -> set[str]:
        """Add the canonical text of ``value``."""
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            acc.add(canonical_json(value))
        return acc

    def combine(self, a: set[str], b: set[str]) -> set[str]:
        """Set union (a new set)."""
        return a | b

    def finish(self, acc: set[str]) -> int:
        """The number of distinct values."""
        return len(acc)

    def dumps(self, acc: set[str]) -> bytes:
        """The sorted list of canonical texts."""
        return json_bytes(sorted(acc))

    def loads(self, data: bytes) -> set[str]:
        """Inverse of :meth:`dumps`."""
        return set(orjson.loads(data))


# --------------------------------------------------------------------------- median / percentile


def _validate_q(q: Any) -> float | list[float]:
    def one(item: Any) -> float:
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise ValueError(f"param 'q' must be a number in [0, 1], got {item!r}")
        if not 0.0 <= float(item) <= 1.0:
            raise ValueError(f"param 'q' must be in [0, 1], got {item!r}")
        return float(item)

    if isinstance(q, Sequence) and not isinstance(q, str | bytes):
        if not q:
            raise ValueError("param 'q' must be a number in [0, 1] or a non-empty list of them")
        qs = [one(item) for item in q]
        twice = sorted({item for item in qs if qs.count(item) > 1})
        if twice:
            raise ValueError(f"param 'q' lists {', '.join(map(str, twice))} twice")
        keys = [_percentile_key(item) for item in qs]
        if len(set(keys)) != len(qs):
            raise ValueError(f"param 'q' has values that share a result key: {keys}")
        return qs
    return one(q)


def _percentile_key(q: float) -> str:
    return f"p{q * 100:g}"


class MedianOp(ObjectOp):
    """Median of the non-null values (mean of the two middle values for even counts).

    Full-state: the accumulator is the list of ``(order_tuple, value)`` of the window.
    """

    op_name: ClassVar[str] = "median"
    numeric: ClassVar[bool] = True
    full_state: ClassVar[bool] = True

    def create(self) -> list[NumEntry]:
        """An empty list."""
        return []

    def accumulate(self, acc: list[NumEntry], value: Any, order: Ordering) -> list[NumEntry]:
        """Append the value unless it is null (``None``/``NaN``)."""
        if value is not None and value == value:
            acc.append((order.as_tuple(), float(value)))
        return acc

    def combine(self, a: list[NumEntry], b: list[NumEntry]) -> list[NumEntry]:
        """Concatenation (a new list)."""
        return a + b

    def _values(self, acc: list[NumEntry]) -> npt.NDArray[np.float64]:
        return np.fromiter((value for _, value in acc), dtype=np.float64, count=len(acc))

    def finish(self, acc: list[NumEntry]) -> Any:
        """The median as a float, ``None`` when there is no value."""
        if not acc:
            return None
        values = sorted(value for _, value in acc)
        mid = len(values) // 2
        if len(values) % 2:
            return values[mid]
        lo, hi = values[mid - 1], values[mid]
        # halve first: lo + hi overflows to inf for two values past 8.9e307
        return lo / 2.0 + hi / 2.0 if abs(lo) > 1e307 or abs(hi) > 1e307 else (lo + hi) / 2.0

    def dumps(self, acc: list[NumEntry]) -> bytes:
        """Sorted little-endian ``(ts, partition, offset, value)`` records.

        Binary rather than JSON so that infinities survive (JSON has no ``inf``).
        """
        records = np.array([(*order, value) for order, value in sorted(acc)], dtype=_ENTRY_DTYPE)
        return records.tobytes()

    def loads(self, data: bytes) -> list[NumEntry]:
        """Inverse of :meth:`dumps`."""
        records = np.frombuffer(data, dtype=_ENTRY_DTYPE).tolist()
        return [((ts, p, o), value) for ts, p, o, value in records]


def _quantiles(values: npt.NDArray[np.float64], q: Any) -> Any:
    """``np.quantile``, without the overflow of its interpolation (``b - a``) for values
    of opposite signs past 8.9e307: such values are halved first and doubled after."""
    big = bool(len(values)) and float(np.max(np.abs(values))) > 1e307
    if not big:
        return np.quantile(values, q)
    return np.quantile(values / 2.0, q) * 2.0


class PercentileOp(MedianOp):
    """Percentile(s) with linear interpolation (``numpy.percentile``'s default method).

    Param ``q``: a quantile in ``[0, 1]`` -> a float; or a list of them -> a dict keyed
    ``"p50"``, ``"p95"``, ``"p99.9"`` (``f"p{q*100:g}"``). ``None`` when there is no value.
    """

    op_name: ClassVar[str] = "percentile"

    def __init__(self, *, q: float | Sequence[float]) -> None:
        self.q = _validate_q(q)

    def finish(self, acc: list[NumEntry]) -> Any:
        """The interpolated quantile(s)."""
        if isinstance(self.q, list):
            if not acc:
                return None
            quantiles = _quantiles(self._values(acc), self.q).tolist()
            return {_percentile_key(q): v for q, v in zip(self.q, quantiles, strict=True)}
        if not acc:
            return None
        return float(_quantiles(self._values(acc), self.q))
