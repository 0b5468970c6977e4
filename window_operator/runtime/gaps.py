"""Input a task's state lacks before a batch: which batches it lost, read back from Kafka.

A broker that loses acknowledged writes (noida-db on SIGKILL, Kafka with one replica
on a power loss) can lose a state task's last transactions whole: their changelog
records and their outputs. The task then restores an older state than Spark's
checkpoint assumes, and the batch it is given starts after the state's positions.
Nothing may be skipped, so the task reads the offsets in between back from Kafka and
runs them first.

Each lost batch runs again as it first ran. The batch carries how the recent batches
began (:class:`~window_operator.runtime.exchange.BatchStart`: their clock and where they
started reading every partition), so the offsets read back are cut at those starts and
every lost batch runs with its own clock, up to the next one's: lateness and retention
are decided as the first time, and what they fired is sent again. Offsets older than
the oldest batch the history names run as one batch, from the clock the state was left
with up to that batch's.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from window_operator.errors import AFRESH, WindowOperatorError
from window_operator.kernel import ClockState, InputPosition
from window_operator.runtime.exchange import InputRange, TaskInput
from window_operator.runtime.inputs import InputRecords

__all__ = [
    "InputGapError",
    "LostBatch",
    "applied_past",
    "between",
    "check_kept",
    "find_gaps",
    "lost_batches",
    "past_end_message",
]


class InputGapError(WindowOperatorError):
    """A task's state ends before the batch starts: input would be skipped."""


@dataclass(frozen=True, slots=True)
class LostBatch:
    """A batch the state lacks: the clocks it ran between (``clock_before`` ``None``: the
    clock the state was left with) and its offsets the state lacks."""

    batch_id: int
    clock_before: ClockState | None
    clock_after: ClockState
    ranges: tuple[InputRange, ...]


def find_gaps(
    task: int, changelog: str, offsets: dict[InputPosition, int], inp: TaskInput
) -> list[InputRange]:
    """The offsets the state of ``task`` (its ``offsets``, restored from the topic
    ``changelog``) lacks before ``inp`` starts, per partition.

    A partition the state holds no position for starts at the job's first offset of it
    (``inp.origin``); one the origin does not name either is new to the job and starts
    with this batch. Raises :class:`InputGapError` for a state without any position in a
    job that ran batches before an origin was recorded (nothing tells where to read).
    """
    if inp.origin is None and not offsets and inp.batch_id > 0 and inp.ranges:
        # a checkpoint from before the origin was recorded: every task runs (and
        # commits) every batch, so a task without positions has lost its state
        first = min(inp.ranges, key=lambda r: (r.source, r.partition))
        raise InputGapError(
            f"task {task} has no state, but the job is at batch {inp.batch_id} "
            f"(input {first.topic}[{first.partition}] from offset {first.start}): its "
            f"changelog {changelog} lost what it held; restart the job from a fresh "
            "checkpoint and changelog, or restore them"
        )
    gaps = []
    origin = inp.origin or {}
    for r in inp.ranges:
        held = offsets.get(r.position)
        after = held + 1 if held is not None else origin.get(r.position, r.start)
        if after < r.start:
            gaps.append(r.span(after, r.start))
    return gaps


def applied_past(offsets: dict[InputPosition, int], inp: TaskInput) -> list[InputRange]:
    """The ranges of ``inp`` whose whole partition range the state (its ``offsets``)
    applied already: a replay of a batch run again from an older Spark checkpoint (after
    a switch between the job's shapes), or input the broker no longer holds. Only these
    ask :func:`check_kept`; a batch run again as it first ran ends past the state."""
    return [r for r in inp.ranges if offsets.get(r.position, -1) >= r.end]


def check_kept(
    task: int, offsets: dict[InputPosition, int], ranges: Sequence[InputRange],
    ends: Mapping[tuple[str, int], int],
) -> None:  # fmt: skip
    """Raise :class:`InputGapError` where the state applied an offset at or past its
    partition's log end ``ends`` (by topic and partition): records written there from now
    on would be taken for replays of the ones it applied, and skipped."""
    for r in ranges:
        held, end = offsets[r.position], ends[(r.topic, r.partition)]
        if held >= end:
            raise InputGapError(past_end_message(f"task {task}", r.topic, r.partition, held, end))


def past_end_message(who: str, topic: str, partition: int, applied: int, end: int) -> str:
    """Why ``who`` stops where its state applied offset ``applied`` of a partition that
    now ends at ``end``."""
    return (
        f"{who}: its state applied {topic}[{partition}] up to offset {applied}, but the "
        f"partition now ends at offset {end}: the broker lost records the job had read "
        "(acknowledged writes lost in a broker crash or an unclean leader election), or "
        "the topic was deleted and created again. Records written there from now on would "
        "be taken for replays of the ones the state applied, and skipped. Start the job "
        f"afresh ({AFRESH}) to accept the loss"
    )


def lost_batches(gaps: Sequence[InputRange], inp: TaskInput) -> list[LostBatch]:
    """``gaps`` cut into the batches that first read them (see module doc), oldest first.

    A batch ``b`` of ``inp.history`` read partition ``p`` from its start there up to the
    next batch's start (``inp``'s own for the newest); a partition ``b`` does not name was
    first read by ``b`` or later.
    """
    marks = inp.history
    out: list[LostBatch] = []

    def cut(
        lo: dict[InputPosition, int] | None, hi: dict[InputPosition, int] | None
    ) -> tuple[InputRange, ...]:
        parts = []
        for g in gaps:
            start = g.start if lo is None else max(g.start, lo.get(g.position, g.start))
            end = g.end if hi is None else min(g.end, hi.get(g.position, g.start))
            if start < end:
                parts.append(g.span(start, end))
        return tuple(parts)

    first = marks[0] if marks else None
    older = cut(None, first.starts if first else None)
    if older:
        upto = first.clock if first else inp.clock_before
        out.append(LostBatch(inp.batch_id, None, upto, older))
    for i, mark in enumerate(marks):
        following = marks[i + 1] if i + 1 < len(marks) else None
        ranges = cut(mark.starts, following.starts if following else None)
        if ranges or out:  # from the first lost batch on, every batch runs again
            after = following.clock if following else inp.clock_before
            out.append(LostBatch(mark.batch_id, mark.clock, after, ranges))
    return out


def between(records: InputRecords, start: int, end: int) -> InputRecords:
    """The records of ``records`` with ``start <= offset < end``."""
    lo, hi = bisect_left(records.offsets, start), bisect_left(records.offsets, end)
    stamps = None if records.timestamps is None else records.timestamps[lo:hi]
    return InputRecords(
        records.topic,
        records.partition,
        records.offsets[lo:hi],
        records.keys[lo:hi],
        records.values[lo:hi],
        stamps,
    )
