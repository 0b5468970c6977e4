"""``simulate``'s input lines: one JSON event per line, with optional position fields.

Besides the event's own fields a line may carry ``partition`` (default 0), ``offset``
(default: the next offset of its partition), ``wall_ms`` (its arrival wall clock, which
stands for its Kafka record timestamp) and ``kafka_key`` (its Kafka record key: a string,
or what ``input.key_format`` reads, see :mod:`window_operator.eventkey`).
A line is parsed as a Kafka value would be (:func:`~window_operator.codecs.json_input.
parse_json`), so every line gets the verdict the streaming job would give its payload;
chunks of clean lines without position fields take the columnar path, with the same
verdicts and values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeGuard

import numpy as np

from window_operator.codecs.avro_input import AvroPayloadDecoder, AvroWire, avro_payload_encoder
from window_operator.codecs.avro_schema import has_binary_fields, load_schema_file
from window_operator.codecs.fastjson import ColumnarJsonDecoder
from window_operator.codecs.json_input import JSON_WHITESPACE, InvalidJsonError, parse_json
from window_operator.config import InputConfig, JoinInputConfig
from window_operator.events import EventBatch, IntArray, RecordDecoder
from window_operator.jsonbytes import json_text
from window_operator.kernel.positions import MAX_OFFSET, MAX_PARTITION
from window_operator.results import ErrorCode, ErrorRecord

__all__ = [
    "MAX_LINE_OFFSET",
    "MAX_LINE_PARTITION",
    "META_FIELDS",
    "first_partition",
    "AvroLines",
    "AvroMisfit",
    "BadPosition",
    "DecodedLines",
    "LineDecoder",
    "avro_lines",
    "bad_position",
    "line_wall",
]

#: The per-line fields of the Kafka record, removed from the event before decoding.
META_FIELDS: Final = ("partition", "offset", "wall_ms", "kafka_key")
#: The largest partition and offset of a line: a Kafka record's (see kernel.positions).
MAX_LINE_PARTITION: Final = MAX_PARTITION
MAX_LINE_OFFSET: Final = MAX_OFFSET


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
    kafka_key: object = None


class AvroLines:
    """An Avro input's lines as its topic holds them, read back as its job reads them.

    A line is written with the input's schema, as ``produce`` writes it, and read back
    by the job's payload decoder, so it gets the job's verdict: a field the schema does
    not have is dropped, a missing one takes its default, a value of another type, or a
    line that does not fit, is ``BAD_AVRO``; logical types come back as the job reads
    them (``timestamp-millis``: epoch ms).
    """

    def __init__(self, schema: str | Path, wire: AvroWire) -> None:
        self.encode = avro_payload_encoder(schema, wire)
        self.decoder = AvroPayloadDecoder(schema, wire=wire)

    def read_back(self, records: Sequence[Any]) -> list[Any | AvroMisfit]:
        """Each record as the job reads it, or why it rejects it."""
        out: list[Any | AvroMisfit] = []
        payloads: list[bytes] = []
        written: list[int] = []
        for i, record in enumerate(records):
            try:
                payloads.append(self.encode(record))
            except ValueError as exc:
                out.append(
                    AvroMisfit(
                        f"the line does not fit the input's Avro schema ({exc}); `produce` "
                        "writes such a line as it is, and the job cannot read it as Avro"
                    )
                )
                continue
            written.append(i)
            out.append(None)
        decoded, failures = self.decoder.decode(payloads)
        for j, reason in failures:
            out[written[j]] = AvroMisfit(reason)
        failed = {j for j, _ in failures}
        for j, i in enumerate(written):
            if j not in failed:
                out[i] = decoded[j]
        return out


@dataclass(frozen=True, slots=True)
class AvroMisfit:
    """Why the job would reject a line of an Avro input (``BAD_AVRO``)."""

    reason: str

    def error(self, partition: int, offset: int, raw: bytes, topic: str | None) -> ErrorRecord:
        """The line's error record."""
        return ErrorRecord(ErrorCode.BAD_AVRO, self.reason, partition, offset, raw, topic)


def avro_lines(inp: InputConfig | JoinInputConfig) -> AvroLines | None:
    """The :class:`AvroLines` of an Avro input (``None``: a JSON input, or a schema
    with ``bytes`` or ``fixed`` fields, which JSON cannot write: its lines are read as
    JSON, the decoded values as the job reads them)."""
    if inp.format != "avro" or inp.avro_schema is None:
        return None
    if has_binary_fields(load_schema_file(Path(inp.avro_schema))):
        return None
    return AvroLines(inp.avro_schema, inp.avro_wire)


class LineDecoder:
    """Decodes chunks of ``simulate`` lines with a job's record decoder (``avro``: the
    input is Avro, each line goes through :class:`AvroLines`).

    ``one_partition``: the run holds one partition (``offsets`` windows), and a line
    that names none (one that is not a JSON object, too) is of the run's partition: the
    one the state holds, else this one (the first a line of the file names, see
    :func:`first_partition`). ``meta``: the fields that give a line's position (``()``:
    every field is the event's).
    """

    def __init__(
        self,
        decoder: RecordDecoder,
        avro: AvroLines | None = None,
        *,
        one_partition: int | None = None,
        meta: Sequence[str] = META_FIELDS,
    ) -> None:
        self.decoder = decoder
        self.avro = avro
        self.one_partition = one_partition
        self.meta = tuple(meta)
        self.columnar = ColumnarJsonDecoder(decoder, absent_fields=self.meta)

    def decode(self, lines: list[bytes], offsets: Mapping[int, int]) -> DecodedLines:
        """Decode ``lines``; ``offsets`` holds the last offset consumed per partition."""
        home = 0
        if self.one_partition is not None:
            home = next(iter(offsets)) if offsets else self.one_partition
        first = offsets.get(0, -1) + 1
        # partition 0 has room for every line (else they take the exact path, which says so)
        fits = first + len(lines) <= MAX_LINE_OFFSET and self.avro is None and home == 0
        clean = self.columnar.decode(lines) if fits else None
        if clean is not None:
            # every line is an event of partition 0 at the next offsets
            clean.offset = np.arange(first, first + len(lines), dtype=np.int64)
            walls = np.full(len(lines), -1, dtype=np.int64)
            return DecodedLines(clean, [], 0, walls, list(lines))
        return self._decode_each(lines, dict(offsets), home)

    def _decode_each(self, lines: list[bytes], last: dict[int, int], home: int) -> DecodedLines:
        bad: list[ErrorRecord] = []
        good: list[_Line] = []
        replayed = 0
        for raw in lines:
            line = _split_line(raw, last, home, self.meta)
            if line is None:
                replayed += 1
            elif isinstance(line, ErrorRecord):
                bad.append(line if self.avro is None else _not_avro(line))
            else:
                good.append(line)
        if self.avro is not None:
            good = self._read_back(self.avro, good, bad)
        decoded = self.decoder.decode_records(
            [g.record for g in good],
            partitions=[g.partition for g in good],
            offsets=[g.offset for g in good],
            raws=[g.raw for g in good],
            record_times=[g.wall for g in good],  # wall_ms stands for the Kafka timestamp
            record_keys=[g.kafka_key for g in good],
        )
        kept = [good[i] for i in decoded.kept]
        walls = np.asarray([g.wall for g in kept], dtype=np.int64)
        raws = [g.raw for g in kept]
        errors = bad + decoded.errors
        if self.avro is not None:  # in input order, as the job's decoding gives them
            errors.sort(key=lambda e: (e.partition or 0, e.offset or 0))
        return DecodedLines(decoded.batch, errors, replayed, walls, raws)

    @staticmethod
    def _read_back(avro: AvroLines, good: list[_Line], bad: list[ErrorRecord]) -> list[_Line]:
        """The lines the job reads from Avro, as it reads them; the others to ``bad``."""
        kept: list[_Line] = []
        for line, record in zip(good, avro.read_back([g.record for g in good]), strict=True):
            if isinstance(record, AvroMisfit):
                bad.append(record.error(line.partition, line.offset, line.raw, None))
            else:
                kept.append(replace(line, record=record))
        return kept


def _not_avro(err: ErrorRecord) -> ErrorRecord:
    """A line that is not JSON, of an Avro input: ``produce`` writes it as it is, which
    the job rejects as ``BAD_AVRO`` (other errors of a line stay)."""
    if err.code is not ErrorCode.BAD_JSON:
        return err
    reason = (
        f"the line is not JSON ({err.reason}); `produce` writes such a line as it is, "
        "and the job cannot read it as Avro"
    )
    return replace(err, code=ErrorCode.BAD_AVRO, reason=reason)


def first_partition(path: Path, meta: Sequence[str] = META_FIELDS) -> int:
    """The first partition a line of the file at ``path`` names (0: none does), the
    partition of a one-partition run (see :class:`LineDecoder`)."""
    if "partition" not in meta:
        return 0
    with open(path, "rb") as lines:
        for raw in lines:
            try:
                record = parse_json(raw.strip(JSON_WHITESPACE))
            except InvalidJsonError:
                continue
            if isinstance(record, dict) and _is_int(record.get("partition")):
                return int(record["partition"])
    return 0


def _split_line(
    raw: bytes, last: dict[int, int], home: int = 0, meta: Sequence[str] = META_FIELDS
) -> _Line | ErrorRecord | None:
    """The line's event and position, an error, or ``None`` for a replayed line.

    ``last`` (the last offset per partition) advances past the line; ``home`` is the
    partition of a line that names none.
    """
    try:
        record: Any = parse_json(raw)
        problem = None
    except InvalidJsonError as exc:
        record, problem = None, exc.reason
    found: dict[str, Any] = {}
    if isinstance(record, dict):
        found = {f: record.pop(f) for f in meta if f in record}
    part = found.get("partition", home)
    off = found.get("offset", last.get(part, -1) + 1 if _is_int(part) else 0)
    bad = bad_position(part, off, MAX_LINE_PARTITION, MAX_LINE_OFFSET, named="offset" in found)
    if bad is not None:
        return bad.error(raw)
    assert _is_int(part) and _is_int(off)  # checked by bad_position
    if off <= last.get(part, -1):
        return None
    last[part] = off
    if problem is not None:
        return ErrorRecord(ErrorCode.BAD_JSON, problem, part, off, raw)
    return _Line(record, part, off, line_wall(found), raw, found.get("kafka_key"))


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
    part: object, off: object, max_partition: int, max_offset: int, *, named: bool = True
) -> BadPosition | None:
    """Whether ``part`` and ``off`` are out of the ranges a line may take (``None``: not);
    ``named``: the line names ``off`` (else it is the one after the partition's last)."""
    if not _is_int(part) or not 0 <= part <= max_partition:
        return BadPosition(
            f"the line's partition must be an integer from 0 to {max_partition}, got "
            f"{json_text(part).decode()}{_META_HINT}",
            None,
        )
    if not named and _is_int(off) and off > max_offset:  # one after the last
        return BadPosition(
            f"the line names no offset, and partition {part} has none left after "
            f"{max_offset} (the largest a line may take)",
            part,
        )
    if not _is_int(off) or not 0 <= off <= max_offset:
        return BadPosition(
            f"the line's offset must be an integer from 0 to {max_offset}, "
            f"got {json_text(off).decode()}" + _META_HINT,
            part,
        )
    return None


#: How a line whose event has fields named as the meta fields is read as it is.
_META_HINT = " (if it is a field of the event, simulate with --no-meta)"


def line_wall(meta: Mapping[str, object]) -> int:
    """The line's ``wall_ms``; ``-1`` (the event time stands in) when it has none that an
    arrival time can be (an integer from 0 to 2^62)."""
    wall = meta.get("wall_ms")
    return wall if _is_int(wall) and 0 <= wall <= 2**62 else -1


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
