"""``simulate`` of a join job: each line names its input in ``source``; each run of
consecutive lines of one input is one ``add_records`` call, all of a micro-batch under
the watermark of its start (as a task adds its inputs on Kafka).

When both inputs read one topic (a self-join), every record of it reaches both inputs
on Kafka: so here every line reaches both, left first, whichever input it names, and a
file loaded with ``produce`` (each line written once) gives the job what ``simulate``
had."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

import numpy as np

from window_operator.arrival import ArrivalClock, future_error
from window_operator.codecs.json_input import InvalidJsonError, parse_json
from window_operator.join import JoinDecoder, JoinOperator, JoinRuntime
from window_operator.join.common import MAX_OFFSET, MAX_PARTITION
from window_operator.kernel import StepStats
from window_operator.rejections import show
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.simulate_input import (
    META_FIELDS,
    AvroLines,
    AvroMisfit,
    bad_position,
    line_wall,
)

__all__ = ["JoinChunk", "run_join_chunk"]


@dataclass
class _JoinRun:
    """Consecutive lines of one input: one ``add_batch``."""

    source: str
    records: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    walls: list[int] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)

    def to_each(self, names: tuple[str, str]) -> list[_JoinRun]:
        """The run as a run of each input, in this order (a self-join's lines; the lists
        are each run's own, as :meth:`keep` and the Avro read-back replace their items)."""
        return [
            _JoinRun(
                name,
                list(self.records),
                list(self.partitions),
                list(self.offsets),
                list(self.walls),
                list(self.raws),
            )
            for name in names
        ]

    def keep(self, rows: list[int]) -> None:
        """Keep only ``rows`` (indices, in order)."""
        self.records = [self.records[i] for i in rows]
        self.partitions = [self.partitions[i] for i in rows]
        self.offsets = [self.offsets[i] for i in rows]
        self.walls = [self.walls[i] for i in rows]
        self.raws = [self.raws[i] for i in rows]


@dataclass(frozen=True, slots=True)
class JoinChunk:
    """What one micro-batch of join lines did: its error records (the lines as their
    ``raw``) and what the operator did with the rest."""

    errors: list[ErrorRecord]
    stats: StepStats


def run_join_chunk(
    runtime: JoinRuntime,
    op: JoinOperator,
    lines: list[bytes],
    clock: ArrivalClock,
    avro: Mapping[str, AvroLines | None],
    meta: Sequence[str] = META_FIELDS,
) -> JoinChunk:
    """Feed one micro-batch (``avro``: the :class:`AvroLines` of each Avro input;
    ``meta``: the fields that give a line's position, besides ``source``)."""
    done = StepStats()
    names = op.spec.names
    # a rows join follows the arrival order: a self-join's line reaches the left input,
    # then the right, before the next line does
    alone = runtime.self_join and runtime.spec.rows is not None
    bad, runs = _runs(lines, names, self_join=runtime.self_join, lines_alone=alone, meta=meta)
    if runtime.self_join:
        runs = [each for run in runs for each in run.to_each(names)]
    line_at: dict[tuple[str | None, int | None, int | None], bytes] = {}
    op.begin_batch()  # retention and lateness: the watermark before the batch, as on Kafka
    for run in runs:
        side = op.side_of(run.source)
        decoder = runtime.decoder(run.source)
        parts = np.asarray(run.partitions, dtype=np.int64)
        # the offsets the operator gives lines without one, so errors find their lines
        run.offsets = op.kernel.positions.assign(
            side, parts, np.asarray(run.offsets, dtype=np.int64)
        ).tolist()
        line_at.update(
            ((decoder.topic, p, o), raw)
            for p, o, raw in zip(run.partitions, run.offsets, run.raws, strict=True)
        )
        # replays go now, before lines are rejected: a replay of a rejected line must not
        # reach the operator, which never saw the line it repeats
        fresh = op.kernel.positions.fresh(side, parts, np.asarray(run.offsets, dtype=np.int64))
        run.keep(np.flatnonzero(fresh).tolist())
        done += StepStats(replayed=len(fresh) - len(run.records))
        lines_avro = avro.get(run.source)
        # rejected before the operator, but handled: a replay must not reject them again
        handled = [] if lines_avro is None else _read_back(lines_avro, run, decoder.topic)
        handled += _reject_future_rows(decoder, run, clock)
        handled = [replace(e, source=run.source) for e in handled]
        done += op.add_records(
            run.source,
            run.records,
            partitions=run.partitions,
            offsets=run.offsets,
            wall_ms=run.walls,
        )
        for err in handled:
            assert err.partition is not None and err.offset is not None
            op.mark_consumed(err.partition, err.offset, source=side)
        bad += handled
    op.end_batch()
    errors = [
        replace(e, raw=line_at.get((e.topic, e.partition, e.offset), e.raw))
        for e in bad + op.get_errors()
    ]
    return JoinChunk(errors, done)


def _read_back(avro: AvroLines, run: _JoinRun, topic: str | None) -> list[ErrorRecord]:
    """Read the run's lines back as the job reads its Avro input; the lines it rejects
    are removed from the run."""
    misfits: dict[int, ErrorRecord] = {}
    for i, record in enumerate(avro.read_back(run.records)):
        if isinstance(record, AvroMisfit):
            misfits[i] = record.error(run.partitions[i], run.offsets[i], run.raws[i], topic)
        else:
            run.records[i] = record
    if misfits:
        run.keep([i for i in range(len(run.records)) if i not in misfits])
    return list(misfits.values())


def _runs(
    lines: list[bytes],
    names: tuple[str, str],
    *,
    self_join: bool = False,
    lines_alone: bool = False,
    meta: Sequence[str] = META_FIELDS,
) -> tuple[list[ErrorRecord], list[_JoinRun]]:
    """The lines' errors, and the runs of consecutive lines of one input (of a
    self-join: consecutive lines, whichever input they name; ``lines_alone``: each line
    a run of its own)."""
    bad: list[ErrorRecord] = []
    runs: list[_JoinRun] = []
    for line in lines:
        parsed = _join_line(line, names, meta)
        if isinstance(parsed, ErrorRecord):
            bad.append(parsed)
            continue
        source, rec, part, off, wall = parsed
        source = names[0] if self_join else source
        if not runs or runs[-1].source != source or lines_alone:
            runs.append(_JoinRun(source))
        run = runs[-1]
        run.raws.append(line)
        run.records.append(rec)
        run.partitions.append(part)
        run.offsets.append(off)
        run.walls.append(wall)
    return bad, runs


def _join_line(
    line: bytes, names: tuple[str, str], meta: Sequence[str] = META_FIELDS
) -> tuple[str, dict[str, Any], int, int, int] | ErrorRecord:
    """``(source, record, partition, offset, wall)`` of a join line, or its error.

    ``offset`` -1: the next offset of the partition; ``wall`` -1: the event time stands
    in for the wall clock, so timers advance with the data.
    """
    try:
        rec = parse_json(line)
    except InvalidJsonError as exc:
        return ErrorRecord(ErrorCode.BAD_JSON, exc.reason, None, None, line)
    if not isinstance(rec, dict):
        reason = f"record must be a JSON object, got {show(rec)}"
        return ErrorRecord(ErrorCode.NOT_AN_OBJECT, reason, None, None, line)
    source = rec.pop("source", None)
    if not isinstance(source, str) or source not in names:
        reason = f"source {source!r} is neither {names[0]!r} nor {names[1]!r}"
        return ErrorRecord(ErrorCode.UNKNOWN_SOURCE, reason, None, None, line)
    found = {f: rec.pop(f) for f in meta if f in rec}
    part = found.get("partition", 0)
    off = found.get("offset", 0)  # absent: the next offset of the partition (-1 below)
    bad = bad_position(part, off, MAX_PARTITION, MAX_OFFSET)
    if bad is not None:
        return bad.error(line)
    assert _is_int(part) and _is_int(off)  # checked by bad_position
    return source, rec, part, off if "offset" in found else -1, line_wall(found)


def _reject_future_rows(
    decoder: JoinDecoder, run: _JoinRun, clock: ArrivalClock
) -> list[ErrorRecord]:
    """Remove the run's far-future records (see :mod:`window_operator.arrival`).

    Records without a valid event time are left to the operator, which rejects them.
    """
    if clock.max_future is None:
        return []
    times = [decoder.event_time(r) for r in run.records]
    timed = [i for i, t in enumerate(times) if t is not None]
    if not timed:
        return []
    ts = np.asarray([times[i] for i in timed], dtype=np.int64)
    check = clock.check(ts, np.asarray([run.walls[i] for i in timed], dtype=np.int64))
    if not check.mask.any():
        return []
    errors: list[ErrorRecord] = []
    rejected: set[int] = set()
    for j in np.flatnonzero(check.mask).tolist():
        i = timed[j]
        code, reason = future_error(int(ts[j]), int(check.arrival[j]), clock.max_future)
        errors.append(
            ErrorRecord(code, reason, run.partitions[i], run.offsets[i], run.raws[i], decoder.topic)
        )
        rejected.add(i)
    run.keep([i for i in range(len(run.records)) if i not in rejected])
    return errors


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
