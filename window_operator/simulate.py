"""Offline simulation: run a job config over a JSONL file of events, as the job would.

Each input line is one event in arrival order. Besides the event's own fields a line
may carry ``partition`` (default 0), ``offset`` (default: the next offset of its
partition) and ``wall_ms`` (the arrival wall clock; default: the event time, so timers
advance with the data). Lines are processed in micro-batches of ``batch_size`` (as the
streaming job does; ``1`` gives per-event semantics), a timer tick follows each batch,
and a final tick at the end of time fires every window. The output is deterministic:
the same input gives byte-identical output.

Join jobs (a config with ``join:``) read the same kind of file, except that every line
names its input in ``source`` (``join.left.name`` or ``join.right.name``; any other
value is an ``UNKNOWN_SOURCE`` error); partitions and offsets are per input. Each run
of consecutive lines of one input is one batch, the state is flushed after every
chunk, and the output has one line per join result (see :mod:`window_operator.join`).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import orjson

from window_operator.fastjson import ColumnarJsonDecoder
from window_operator.job import JobRuntime, TaskOperator
from window_operator.join import JoinOperator, JoinRuntime
from window_operator.policies import END_OF_TIME
from window_operator.results import ErrorCode, ErrorRecord, ResultBatch

__all__ = ["SimulationSummary", "simulate"]

_META_FIELDS = ("partition", "offset", "wall_ms")


@dataclass
class SimulationSummary:
    """Counts of what a simulation did."""

    lines: int = 0
    applied: int = 0
    replayed: int = 0
    results: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def rejected(self) -> int:
        """Input records sent to the error output."""
        return sum(self.errors.values())


def _chunks(stream: IO[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for line in stream:
        line = line.strip()
        if not line:
            continue
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def simulate(
    runtime: JobRuntime | JoinRuntime,
    input_path: Path,
    out: IO[bytes],
    *,
    errors_out: IO[bytes] | None = None,
    state_dir: Path | None = None,
    batch_size: int = 10_000,
) -> SimulationSummary:
    """Run ``runtime``'s job over ``input_path`` and write JSON lines of results to ``out``."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if isinstance(runtime, JoinRuntime):
        return _simulate_join(runtime, input_path, out, errors_out, state_dir, batch_size)
    summary = SimulationSummary()
    with tempfile.TemporaryDirectory(prefix="window-operator-sim-") as tmp:
        agg = runtime.open_task(state_dir if state_dir is not None else Path(tmp))
        fast = ColumnarJsonDecoder(runtime.decoder, absent_fields=_META_FIELDS)
        try:
            with open(input_path, "rb") as stream:
                for chunk in _chunks(stream, batch_size):
                    summary.lines += len(chunk)
                    rejected = _run_chunk(runtime, agg, chunk, summary, fast)
                    _drain(agg, rejected, out, errors_out, summary)
            agg.timeout(END_OF_TIME)
            _drain(agg, [], out, errors_out, summary)
        finally:
            agg.close()
    return summary


def _run_chunk(
    runtime: JobRuntime,
    agg: TaskOperator,
    lines: list[bytes],
    summary: SimulationSummary,
    fast: ColumnarJsonDecoder,
) -> list[ErrorRecord]:
    """Feed one micro-batch; return the records rejected before reaching the aggregator."""
    clean = fast.decode(lines)
    if clean is not None:
        # a clean chunk: every line is an event of partition 0 with the default offsets
        clean.wall_ms = clean.ts
        stats = agg.add_batch(clean)
        summary.applied += stats.applied
        agg.timeout(int(clean.ts.max()))
        return []
    loads = orjson.loads
    records: list[Any] = []
    raws: list[bytes] = []
    parts: list[int] = []
    offsets: list[int] = []
    walls: list[int] = []
    bad: list[ErrorRecord] = []
    next_offset = {pos.partition: off for pos, off in agg.offsets.items()}
    for line in lines:
        try:
            rec = loads(line)
        except orjson.JSONDecodeError as exc:
            rec = exc
        meta: dict[str, Any] = {}
        if isinstance(rec, dict):
            for f in _META_FIELDS:
                if f in rec:
                    meta[f] = rec.pop(f)
        part = meta.get("partition", 0)
        if not isinstance(part, int) or isinstance(part, bool) or part < 0:
            bad.append(
                ErrorRecord(ErrorCode.NOT_AN_OBJECT, f"bad partition {part!r}", None, None, line)
            )
            continue
        off = meta.get("offset")
        if off is None:
            off = next_offset.get(part, -1) + 1
        elif not isinstance(off, int) or isinstance(off, bool):
            bad.append(
                ErrorRecord(ErrorCode.NOT_AN_OBJECT, f"bad offset {off!r}", part, None, line)
            )
            continue
        if off <= next_offset.get(part, -1):
            summary.replayed += 1
            continue
        next_offset[part] = off
        if isinstance(rec, orjson.JSONDecodeError):
            bad.append(ErrorRecord(ErrorCode.BAD_JSON, f"invalid JSON: {rec}", part, off, line))
            continue
        wall = meta.get("wall_ms")
        records.append(rec)
        raws.append(line)
        parts.append(part)
        offsets.append(off)
        walls.append(wall if isinstance(wall, int) and not isinstance(wall, bool) else -1)
    decoded = runtime.decoder.decode_records(records, partitions=parts, offsets=offsets, raws=raws)
    batch = decoded.batch
    if len(batch):
        # The default wall clock is the event time: timers advance with the data.
        kept_walls = [walls[i] for i in decoded.kept]
        batch.wall_ms = _wall_column(kept_walls, batch.ts)
    stats = agg.add_batch(batch)
    summary.applied += stats.applied
    summary.replayed += stats.replayed
    # Rejected records were handled too: a replay must not reject them again.
    for err in bad + decoded.errors:
        if err.partition is not None and err.offset is not None:
            agg.mark_consumed(err.partition, err.offset)
    if len(batch) and batch.wall_ms is not None:
        agg.timeout(int(batch.wall_ms.max()))
    return bad + decoded.errors


def _wall_column(walls: list[int], ts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    wall = np.asarray(walls, dtype=np.int64)
    missing = wall < 0
    if missing.any():
        wall[missing] = ts[missing]
    return wall


def _drain(
    agg: TaskOperator,
    rejected: list[ErrorRecord],
    out: IO[bytes],
    errors_out: IO[bytes] | None,
    summary: SimulationSummary,
) -> None:
    for batch in agg.take_result_batches():
        summary.results += len(batch)
        out.write(_result_lines(batch))
    for err in rejected + agg.get_errors():
        summary.errors[err.code.value] += 1
        if errors_out is not None:
            errors_out.write(orjson.dumps(err.to_dict()) + b"\n")


def _result_lines(batch: ResultBatch) -> bytes:
    dumps = orjson.dumps
    names = list(batch.values)
    cols = [batch.values[n] for n in names]
    starts = batch.window_start.tolist()
    ends = batch.window_end.tolist()
    seqs = batch.update_seq.tolist()
    kind = batch.kind.value
    lines = [
        dumps(
            {
                "key": key,
                "window_start": starts[i],
                "window_end": ends[i],
                "kind": kind,
                "update_seq": seqs[i],
                "values": {n: c[i] for n, c in zip(names, cols, strict=True)},
            }
        )
        for i, key in enumerate(batch.keys)
    ]
    lines.append(b"")
    return b"\n".join(lines)


# ---------------------------------------------------------------------------------------
# Join jobs
# ---------------------------------------------------------------------------------------


def _simulate_join(
    runtime: JoinRuntime,
    input_path: Path,
    out: IO[bytes],
    errors_out: IO[bytes] | None,
    state_dir: Path | None,
    batch_size: int,
) -> SimulationSummary:
    summary = SimulationSummary()
    with tempfile.TemporaryDirectory(prefix="window-operator-sim-") as tmp:
        op = runtime.open_task(state_dir if state_dir is not None else Path(tmp))
        try:
            with open(input_path, "rb") as stream:
                for chunk in _chunks(stream, batch_size):
                    summary.lines += len(chunk)
                    rejected = _run_join_chunk(op, chunk, summary)
                    _drain_join(op, rejected, out, errors_out, summary)
                    # as a task does after each micro-batch: a checkpoint, bounded memory
                    op.flush()
            op.timeout(END_OF_TIME)
            _drain_join(op, [], out, errors_out, summary)
        finally:
            op.close()
    return summary


@dataclass
class _JoinRun:
    """Consecutive lines of one input: one ``add_batch``."""

    source: str
    records: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    walls: list[int] = field(default_factory=list)


def _run_join_chunk(
    op: JoinOperator, lines: list[bytes], summary: SimulationSummary
) -> list[ErrorRecord]:
    """Feed one micro-batch; return the records rejected before reaching the operator."""
    names = op.spec.names
    bad: list[ErrorRecord] = []
    runs: list[_JoinRun] = []
    for line in lines:
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            bad.append(ErrorRecord(ErrorCode.BAD_JSON, f"invalid JSON: {exc}", None, None, line))
            continue
        if not isinstance(rec, dict):
            reason = f"record must be a JSON object, got {type(rec).__name__}"
            bad.append(ErrorRecord(ErrorCode.NOT_AN_OBJECT, reason, None, None, line))
            continue
        source = rec.pop("source", None)
        if not isinstance(source, str) or source not in names:
            reason = f"source {source!r} is neither {names[0]!r} nor {names[1]!r}"
            bad.append(ErrorRecord(ErrorCode.UNKNOWN_SOURCE, reason, None, None, line))
            continue
        meta = {f: rec.pop(f) for f in _META_FIELDS if f in rec}
        part = meta.get("partition", 0)
        off = meta.get("offset", -1)
        if not _is_int(part) or part < 0:
            reason = f"bad partition {part!r}"
            bad.append(ErrorRecord(ErrorCode.NOT_AN_OBJECT, reason, None, None, line))
            continue
        if not _is_int(off) or ("offset" in meta and off < 0):
            reason = f"bad offset {off!r}"
            bad.append(ErrorRecord(ErrorCode.NOT_AN_OBJECT, reason, part, None, line))
            continue
        wall = meta.get("wall_ms")
        if not runs or runs[-1].source != source:
            runs.append(_JoinRun(source))
        run = runs[-1]
        run.records.append(rec)
        run.partitions.append(part)
        run.offsets.append(off)
        # -1: the event time stands in for the wall clock, so timers advance with the data
        run.walls.append(wall if isinstance(wall, int) and not isinstance(wall, bool) else -1)
    for run in runs:
        stats = op.add_records(
            run.source,
            run.records,
            partitions=run.partitions,
            offsets=run.offsets,
            wall_ms=run.walls,
        )
        summary.applied += stats.applied
        summary.replayed += stats.replayed
    return bad


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _drain_join(
    op: JoinOperator,
    rejected: list[ErrorRecord],
    out: IO[bytes],
    errors_out: IO[bytes] | None,
    summary: SimulationSummary,
) -> None:
    for batch in op.take_result_batches():
        summary.results += len(batch)
        out.write(batch.to_json_lines())
    for err in rejected + op.get_errors():
        summary.errors[err.code.value] += 1
        if errors_out is not None:
            errors_out.write(orjson.dumps(err.to_dict()) + b"\n")
