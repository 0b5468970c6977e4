"""Offsets as Spark checkpoints them, and how a micro-batch's offset ranges are sized.

Spark keeps the source's offsets as JSON ``{"topic": {"partition": next_offset}}``;
:func:`rate_limit` applies ``maxOffsetsPerTrigger`` and :func:`split_ranges`
``minPartitions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from window_operator.spark.kafka_source.schema import EARLIEST, OffsetMap, TopicPartitionKey

__all__ = [
    "OffsetRange",
    "offsets_from_json",
    "offsets_to_json",
    "rate_limit",
    "split_ranges",
]


class OffsetRange(NamedTuple):
    """Offsets ``start <= offset < until`` of one topic partition (start may be EARLIEST)."""

    tp: TopicPartitionKey
    start: int
    until: int


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Canonical (sorted) JSON-able form, so equal offsets serialise to equal strings."""
    out: dict[str, dict[str, int]] = {}
    for topic, part in sorted(offsets):
        out.setdefault(topic, {})[str(part)] = int(offsets[(topic, part)])
    return out


def offsets_from_json(offsets: Mapping[str, Any] | None) -> OffsetMap:
    """Inverse of :func:`offsets_to_json` (``None``: no offsets)."""
    out: OffsetMap = {}
    for topic, parts in (offsets or {}).items():
        for p, off in parts.items():
            out[(str(topic), int(p))] = int(off)
    return out


def rate_limit(limit: int, begins: Mapping[TopicPartitionKey, int], ends: OffsetMap) -> OffsetMap:
    """Cap ``ends`` so that exactly ``limit`` offsets are admitted when the backlog exceeds it.

    Like Spark's source, no partition with a backlog is starved: each gets one offset, and
    the rest of ``limit`` is shared in proportion to the remaining backlogs (largest-remainder
    rounding, ties broken by topic/partition), so the total never exceeds ``limit``. If
    ``limit`` is smaller than the number of partitions with a backlog, the partitions that
    get one offset rotate with the start offsets (deterministic when a batch is replayed).
    """
    tps = sorted(tp for tp, end in ends.items() if end > begins[tp])
    sizes = {tp: ends[tp] - begins[tp] for tp in tps}
    total = sum(sizes.values())
    if total <= limit:
        return dict(ends)
    shares = dict.fromkeys(tps, 0)
    if limit < len(tps):
        k = sum(begins[tp] for tp in tps) % len(tps)
        for tp in (tps[k:] + tps[:k])[:limit]:
            shares[tp] = 1
    else:
        rest = limit - len(tps)
        rest_total = total - len(tps)
        remainders: list[tuple[int, TopicPartitionKey]] = []
        for tp in tps:
            q, r = divmod(rest * (sizes[tp] - 1), rest_total)
            shares[tp] = 1 + q
            remainders.append((r, tp))
        leftover = limit - sum(shares.values())
        remainders.sort(key=lambda item: (-item[0], item[1]))
        for _, tp in remainders[:leftover]:
            shares[tp] += 1
    out = dict(ends)
    for tp, share in shares.items():
        out[tp] = min(ends[tp], begins[tp] + share)
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split ``ranges`` so there are about ``min_partitions`` of them (``minPartitions``).

    Each range gets a share of the parts in proportion to its size; ranges from
    :data:`EARLIEST` (size unknown on the driver) are kept whole.
    """
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    sized = [r for r in ranges if r.start != EARLIEST]
    total = sum(r.until - r.start for r in sized)
    if total <= 0:
        return ranges
    out: list[OffsetRange] = []
    for tp, begin, until in ranges:
        if begin == EARLIEST:
            out.append(OffsetRange(tp, begin, until))
            continue
        size = until - begin
        parts = max(1, min(size, round(size / total * min_partitions)))
        for i in range(parts):
            lo = begin + size * i // parts
            hi = begin + size * (i + 1) // parts
            if lo < hi:
                out.append(OffsetRange(tp, lo, hi))
    return out
