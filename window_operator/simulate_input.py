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

__all__ = ["META_FIELDS", "DecodedLines", "LineDecoder"]

#: The per-line position fields, removed from the event before decoding.
META_FIELDS: Final = ("partition", "offset", "wall_ms")


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
        clean = self.columnar.decode(lines)
        if clean is not None:
            # every line is an event of partition 0 at the next offsets
            first = offsets.get(0, -1) + 1
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
    if not _is_int(part) or part < 0:
        reason = f"the line's partition must be an integer >= 0, got {part!r}"
        return ErrorRecord(ErrorCode.WRONG_TYPE, reason, None, None, raw)
    off = meta.get("offset")
    if "offset" not in meta:
        off = last.get(part, -1) + 1
    elif not _is_int(off) or off < 0:
        reason = f"the line's offset must be an integer >= 0, got {off!r}"
        return ErrorRecord(ErrorCode.WRONG_TYPE, reason, part, None, raw)
    if off <= last.get(part, -1):
        return None
    last[part] = off
    if problem is not None:
        return ErrorRecord(ErrorCode.BAD_JSON, problem, part, off, raw)
    wall = meta.get("wall_ms")
    return _Line(record, part, off, wall if _is_int(wall) else -1, raw)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
