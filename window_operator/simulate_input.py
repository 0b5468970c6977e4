"""``simulate``'s input lines: one JSON event per line, with optional position fields.

Besides the event's own fields a line may carry ``partition`` (default 0), ``offset``
(default: the next offset of its partition) and ``wall_ms`` (its arrival wall clock).
A line is parsed as a Kafka value would be (:func:`~window_operator.codecs.json_input.
parse_json`), so every line gets the verdict the streaming job would give its payload;
chunks of clean lines without position fields take the columnar path, with the same
verdicts and values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import numpy as np

from window_operator.codecs.fastjson import ColumnarJsonDecoder
from window_operator.codecs.json_input import InvalidJsonError, parse_json
from window_operator.events import EventBatch, IntArray, RecordDecoder
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "MAX_LINE_OFFSET",
    "MAX_LINE_PARTITION",
    "META_FIELDS",
    "DecodedLines",
    "LineDecoder",
    "BadPosition",
    "bad_position",
    "line_wall",
]

#: The per-line position fields, removed from the event before decoding.
META_FIELDS: Final = ("partition", "offset", "wall_ms")
#: The largest partition of a line (Kafka's partition ids are 32-bit).
MAX_LINE_PARTITION: Final = 2**31 - 1
#: The largest offset of a line (Kafka's are 64-bit; one short, so the next is one too).
MAX_LINE_OFFSET: Final = 2**63 - 2


@dataclass(slots=True)
class DecodedLines:
    """A chunk of lines decoded: events, rejected lines, replays skipped.

    ``walls`` and ``raws`` are per batch row: the line's ``wall_ms`` (``-1``: none) and
    the line itself.
    """

    batch: EventBatch
    errors: list[ErrorRecord]
    replayed: int
    walls: IntArray
    raws: list[bytes]


@dataclass(slots=True)
class _Line:
    record: Any
    partition: int
    offset: int
    wall: int
    raw: bytes


class LineDecoder:
    """Decodes chunks of ``simulate`` lines with a job's record decoder."""

    def __init__(self, decoder: RecordDecoder) -> None:
        self.decoder = decoder
        self.columnar = ColumnarJsonDecoder(decoder, absent_fields=META_FIELDS)

    def decode(self, lines: list[bytes], offsets: Mapping[int, int]) -> DecodedLines:
        """Decode ``lines``; ``offsets`` holds the last offset consumed per partition."""
        first = offsets.get(0, -1) + 1
        # partition 0 has room for every line (else they take the exact path, which says so)
        clean = self.columnar.decode(lines) if first + len(lines) <= MAX_LINE_OFFSET else None
        if clean is not None:
            # every line is an event of partition 0 at the next offsets
            clean.offset = np.arange(first, first + len(lines), dtype=np.int64)
            walls = np.full(len(lines), -1, dtype=np.int64)
            return DecodedLines(clean, [], 0, walls, list(lines))
        return self._decode_each(lines, dict(offsets))

    def _decode_each(self, lines: list[bytes], last: dict[int, int]) -> DecodedLines:
        bad: list[ErrorRecord] = []
        good: list[_Line] = []
        replayed = 0
        for raw in lines:
            line = _split_line(raw, last)
            if line is None:
                replayed += 1
            elif isinstance(line, ErrorRecord):
                bad.append(line)
            else:
                good.append(line)
        decoded = self.decoder.decode_records(
            [g.record for g in good],
            partitions=[g.partition for g in good],
            offsets=[g.offset for g in good],
            raws=[g.raw for g in good],
        )
        kept = [good[i] for i in decoded.kept]
        walls = np.asarray([g.wall for g in kept], dtype=np.int64)
        raws = [g.raw for g in kept]
        return DecodedLines(decoded.batch, bad + decoded.errors, replayed, walls, raws)


def _split_line(raw: bytes, last: dict[int, int]) -> _Line | ErrorRecord | None:
    """The line's event and position, an error, or ``None`` for a replayed line.

    ``last`` (the last offset per partition) advances past the line.
    """
    try:
        record: Any = parse_json(raw)
        problem = None
    except InvalidJsonError as exc:
        record, problem = None, exc.reason
    meta: dict[str, Any] = {}
    if isinstance(record, dict):
        meta = {f: record.pop(f) for f in META_FIELDS if f in record}
    part = meta.get("partition", 0)
    off = meta.get("offset", last.get(part, -1) + 1 if _is_int(part) else 0)
    bad = bad_position(part, off, MAX_LINE_PARTITION, MAX_LINE_OFFSET)
    if bad is not None:
        return bad.error(raw)
    assert _is_int(part) and _is_int(off)  # checked by bad_position
    if off <= last.get(part, -1):
        return None
    last[part] = off
    if problem is not None:
        return ErrorRecord(ErrorCode.BAD_JSON, problem, part, off, raw)
    return _Line(record, part, off, line_wall(meta), raw)


@dataclass(frozen=True, slots=True)
class BadPosition:
    """Why a line's partition or offset cannot be a Kafka record's, and the partition
    when that one is right."""

    reason: str
    partition: int | None

    def error(self, raw: bytes) -> ErrorRecord:
        """The line's error record."""
        return ErrorRecord(ErrorCode.WRONG_TYPE, self.reason, self.partition, None, raw)


def bad_position(
    part: object, off: object, max_partition: int, max_offset: int
) -> BadPosition | None:
    """Whether ``part`` and ``off`` are out of the ranges a line may take (``None``: not)."""
    if not _is_int(part) or not 0 <= part <= max_partition:
        return BadPosition(
            f"the line's partition must be an integer from 0 to {max_partition}, got {part!r}",
            None,
        )
    if not _is_int(off) or not 0 <= off <= max_offset:
        return BadPosition(
            f"the line's offset must be an integer from 0 to {max_offset}, got {off!r}", part
        )
    return None


def line_wall(meta: Mapping[str, object]) -> int:
    """The line's ``wall_ms``; ``-1`` (the event time stands in) when it has none that an
    arrival time can be (an integer from 0 to 2^62)."""
    wall = meta.get("wall_ms")
    return wall if _is_int(wall) and 0 <= wall <= 2**62 else -1


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
