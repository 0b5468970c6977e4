"""Offline simulation: run a job config over a JSONL file of events, as the job would.

Each input line is one event in arrival order. Besides the event's own fields a line
may carry ``partition`` (default 0), ``offset`` (default: the next offset of its
partition), ``kafka_key`` (the Kafka record key) and ``wall_ms`` (the arrival wall clock,
which stands for the Kafka record timestamp; default: the event time, so timers
advance with the data). Lines are processed in micro-batches of ``batch_size`` (as the
streaming job does; ``1`` gives per-event semantics), a timer tick follows each batch,
and a final tick at the end of time fires every window. A line that makes a user-defined
operation raise is an ``INTERNAL_ERROR``, as in a state task. The output is
deterministic: the same input gives byte-identical output.

Join jobs (a config with ``join:``) read the same kind of file, except that every line
names its input in ``source`` (``join.left.name`` or ``join.right.name``; any other
value is an ``UNKNOWN_SOURCE`` error); partitions and offsets are per input. Each run
of consecutive lines of one input is one batch, the state is flushed after every
chunk, and the output has one line per join result (see :mod:`window_operator.join`).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import numpy as np
import orjson

from window_operator.arrival import ArrivalClock, future_errors
from window_operator.codecs.json_input import JSON_WHITESPACE
from window_operator.config import OffsetsWindow
from window_operator.errors import UserCodeExitError, WindowOperatorError
from window_operator.events import EventBatch
from window_operator.job import JobRuntime, TaskOperator
from window_operator.join import JoinOperator, JoinResultBatch, JoinRuntime
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.runtime.guard import add_guarded, internal_error
from window_operator.simulate_input import (
    META_FIELDS,
    DecodedLines,
    LineDecoder,
    avro_lines,
    first_partition,
)
from window_operator.simulate_join import run_join_chunk
from window_operator.simulate_output import ResultLines

__all__ = ["FinishedStateError", "SimulationSummary", "simulate"]


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
        return sum(n for code, n in self.errors.items() if code != ErrorCode.RESULT_ERROR)

    @property
    def result_errors(self) -> int:
        """Window results not written (sent to the error output as ``RESULT_ERROR``)."""
        return self.errors[ErrorCode.RESULT_ERROR.value]


def _chunks(stream: IO[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for line in stream:
        line = line.strip(JSON_WHITESPACE)  # a line the job would read as a value
        if not line:
            continue
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class FinishedStateError(WindowOperatorError):
    """The state of a run whose final timer fired cannot take more events."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(
            f"the state in {state_dir} is of a finished run: its final timer fired every "
            "window at +infinity, so every new event would be out of retention. Continue "
            "a stream from a run made with --keep-open, or use a new --state-dir"
        )
        self.state_dir = state_dir


def simulate(
    runtime: JobRuntime | JoinRuntime,
    input_path: Path,
    out: IO[bytes],
    *,
    errors_out: IO[bytes] | None = None,
    state_dir: Path | None = None,
    batch_size: int = 10_000,
    progress: Callable[[int], object] | None = None,
    final: bool = True,
    meta: Sequence[str] = META_FIELDS,
) -> SimulationSummary:
    """Run ``runtime``'s job over ``input_path`` and write JSON lines of results to ``out``.

    ``progress`` is called after each micro-batch with the bytes of the file read so far.
    ``final``: after the last line a timer at +infinity fires every window; without it
    the state (in ``state_dir``) stays open, and another run over it continues the
    stream. Raises :class:`FinishedStateError` for a ``state_dir`` whose final timer
    fired. ``meta``: the fields a line gives its position in (``()``: none, every field
    is the event's).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    summary = SimulationSummary()
    with tempfile.TemporaryDirectory(prefix="window-operator-sim-") as tmp:
        path = state_dir if state_dir is not None else Path(tmp)
        running = _Running(runtime.open_task(path))
        try:
            results = ResultLines(runtime.config)
            if running.op.watermark >= END_OF_TIME:
                raise FinishedStateError(path)
            clock = _arrival_clock(runtime, running.op)
            step = _step(runtime, running, clock, meta, _home(runtime, input_path, meta))
            with open(input_path, "rb") as stream:
                for chunk in _chunks(stream, batch_size):
                    summary.lines += len(chunk)
                    rejected = step(chunk, summary)  # may replace running.op
                    _drain(running.op, rejected, out, errors_out, summary, results)
                    if progress is not None:
                        progress(stream.tell())
                    if _flush_each_batch(runtime):
                        running.op.flush()
            if final:
                running.op.timeout(END_OF_TIME)
                _drain(running.op, [], out, errors_out, summary, results)
        except SystemExit as exc:  # only user code exits while the job runs
            raise UserCodeExitError.of(exc) from exc
        finally:
            running.op.close()
    return summary


def _home(runtime: JobRuntime | JoinRuntime, path: Path, meta: Sequence[str]) -> int | None:
    """The partition of an ``offsets`` job's lines that name none (``None``: another job)."""
    if isinstance(runtime, JobRuntime) and isinstance(runtime.config.window, OffsetsWindow):
        return first_partition(path, meta)
    return None


def _flush_each_batch(runtime: JobRuntime | JoinRuntime) -> bool:
    """Whether to flush after each micro-batch, as a task commits it: a join (its
    checkpoint bounds its memory), and a job with user-defined operations (the flush is
    the state a batch that makes one raise starts again from). Other jobs keep their
    state in memory within ``state.cache_mb``: the output is the same, sooner."""
    return isinstance(runtime, JoinRuntime) or runtime.user_operations


@dataclass(eq=False)
class _Running:
    """The operator of a simulation. A batch that makes a user-defined operation raise
    replaces it with one restored from the last flush, as a state task does
    (:func:`~window_operator.runtime.guard.add_guarded`)."""

    op: TaskOperator | JoinOperator


Step = Callable[[list[bytes], SimulationSummary], list[ErrorRecord]]
"""Feeds one micro-batch of lines; returns the records rejected before the operator."""


def _step(
    runtime: JobRuntime | JoinRuntime,
    running: _Running,
    clock: ArrivalClock,
    meta: Sequence[str],
    home: int | None,
) -> Step:
    """How lines reach the job's operator: decoded by the job's decoder, or split by input
    (``home``: the partition of an ``offsets`` job's lines that name none)."""
    if isinstance(runtime, JoinRuntime):
        join = running.op
        assert isinstance(join, JoinOperator)
        sides = (runtime.config.join.left, runtime.config.join.right)
        avro = {side.name: avro_lines(side) for side in sides}

        def join_step(chunk: list[bytes], summary: SimulationSummary) -> list[ErrorRecord]:
            done = run_join_chunk(runtime, join, chunk, clock, avro, meta)
            summary.applied += done.stats.applied
            summary.replayed += done.stats.replayed
            return done.errors

        return join_step
    decoder = LineDecoder(
        runtime.decoder, avro_lines(runtime.config.input), one_partition=home, meta=meta
    )

    def step(chunk: list[bytes], summary: SimulationSummary) -> list[ErrorRecord]:
        agg = running.op
        assert not isinstance(agg, JoinOperator)
        lines = decoder.decode(chunk, _partition_offsets(agg))
        running.op, rejected = _run_chunk(runtime, agg, lines, clock, summary)
        return rejected

    return step


def _arrival_clock(
    runtime: JobRuntime | JoinRuntime, op: TaskOperator | JoinOperator
) -> ArrivalClock:
    """The simulated arrival clock, continued from a kept-open state's wall clock (so
    the first line of a continued run is checked as it would be in one run)."""
    clock = ArrivalClock(runtime.config.watermark.max_future)
    now = op.clock_state().now
    if now > NO_WATERMARK:
        clock.now = now
    return clock


def _run_chunk(
    runtime: JobRuntime,
    agg: TaskOperator,
    lines: DecodedLines,
    clock: ArrivalClock,
    summary: SimulationSummary,
) -> tuple[TaskOperator, list[ErrorRecord]]:
    """Feed one decoded micro-batch; return the operator holding it (a fresh one when the
    batch made it raise) and the batch's error records."""
    batch = lines.batch
    rejected = list(lines.errors)
    summary.replayed += lines.replayed
    future = clock.check(batch.ts, lines.walls)
    if future.mask.any():
        rows = np.flatnonzero(future.mask).tolist()
        future_raws: list[bytes | None] = [lines.raws[r] for r in rows]
        assert clock.max_future is not None
        rejected += future_errors(batch, rows, future.arrival, clock.max_future, future_raws)
        keep = np.flatnonzero(~future.mask)
        batch, walls = batch.take(keep), lines.walls[keep]
        raws = [lines.raws[i] for i in keep.tolist()]
    else:
        walls, raws = lines.walls, lines.raws
    # The default wall clock is the event time: timers advance with the data.
    batch.wall_ms = np.where(walls < 0, batch.ts, walls)
    agg, failed = _add_guarded(runtime, agg, batch, summary)
    if failed:
        rejected += [
            internal_error(
                "the operator",
                exc,
                topic=None,
                partition=int(batch.partition[row]),
                offset=int(batch.offset[row]),
                raw=raws[row],
            )
            for row, exc in failed
        ]
        keep = np.setdiff1d(np.arange(len(batch)), [row for row, _ in failed])
        batch, raws = batch.take(keep), [raws[i] for i in keep.tolist()]
    # Rejected records were handled too: a replay must not reject them again.
    for err in rejected:
        if err.partition is not None and err.offset is not None:
            agg.mark_consumed(err.partition, err.offset)
    if len(batch):
        assert batch.wall_ms is not None  # set above, kept by take
        agg.timeout(int(batch.wall_ms.max()))
    return agg, rejected + _with_lines(agg.get_errors(), batch, raws)


def _add_guarded(
    runtime: JobRuntime, agg: TaskOperator, batch: EventBatch, summary: SimulationSummary
) -> tuple[TaskOperator, list[tuple[int, BaseException]]]:
    """``agg.add_batch(batch)``; rows that make it raise (a user-defined operation that
    fails on a value) are found and left out, as a state task does: the operator holding
    the other rows, and the rows that raised. Without user-defined operations an
    exception is a bug, and the state of the last flush is not the batch's start: it
    propagates."""
    if not runtime.user_operations:
        stats = agg.add_batch(batch)
        summary.applied += stats.applied
        summary.replayed += stats.replayed
        return agg, []
    reopened: list[TaskOperator] = []

    def reopen() -> TaskOperator:
        fresh = runtime.operator(agg.store)  # as the last flush left it
        # the parts of the batch it is given one by one see the watermark of the batch's
        # start, as its rows do in one add_batch (and on Kafka): an earlier part must
        # not make a later one late
        fresh.begin_batch()
        reopened.append(fresh)
        return fresh

    result = add_guarded(reopen, agg, batch, EventBatch.take, len(batch))
    summary.applied += result.stats.applied
    summary.replayed += result.stats.replayed
    if not reopened:
        return agg, result.failed
    reopened[-1].end_batch()
    return reopened[-1], result.failed


def _with_lines(
    errors: list[ErrorRecord], batch: EventBatch, raws: list[bytes]
) -> list[ErrorRecord]:
    """The operator's errors with their lines as ``raw`` (it only knows key and time)."""
    if not errors:
        return errors
    where = zip(batch.partition.tolist(), batch.offset.tolist(), strict=True)
    line_at = dict(zip(where, raws, strict=True))
    return [
        e if (line := line_at.get((e.partition, e.offset))) is None else replace(e, raw=line)
        for e in errors
    ]


def _drain(
    op: TaskOperator | JoinOperator,
    rejected: list[ErrorRecord],
    out: IO[bytes],
    errors_out: IO[bytes] | None,
    summary: SimulationSummary,
    results: ResultLines,
) -> None:
    """Write the operator's pending results, then ``rejected``, its error records and
    those of the results that cannot be written."""
    unwritten: list[ErrorRecord] = []
    for batch in op.take_result_batches():
        if isinstance(batch, JoinResultBatch):
            text, errors = results.of_join(batch)
            summary.results += text.count(b"\n")
            out.write(text)
        else:
            lines, errors = results.of(batch)
            summary.results += len(lines)
            if lines:
                out.write(b"\n".join(lines) + b"\n")
        unwritten += errors
    for err in rejected + op.get_errors() + unwritten:
        summary.errors[err.code.value] += 1
        if errors_out is not None:
            errors_out.write(orjson.dumps(err.to_dict()) + b"\n")


def _partition_offsets(agg: TaskOperator) -> dict[int, int]:
    """The operator's last applied offset per partition (of its one input)."""
    return {pos.partition: off for pos, off in agg.offsets.items()}
