"""Which input partitions have records the job has not read yet (the driver's view).

A partition stops holding the watermark back once it was idle for
``watermark.idle_timeout``. Idle means that it brings nothing: not that the job has not
read it for a while. Between micro-batches, after a slow batch, or after the job was
stopped for longer than the timeout, a partition whose records wait unread has not
been read for that long, although it is anything but idle; taken for idle, it would let
the watermark jump to the other partitions' event times, and its waiting records would
be late or out of retention. So before the clock moves on at a batch or a timer pass,
the driver asks the broker for the end (the last stable offset, as the job reads) of
every partition the clock holds an event time of, and one whose end is past the last
range the job read of it counts as active at that moment, as the records of a batch do.

A partition with no event time yet (never read, or every record of it rejected) would
not count at all: the watermark could pass the records waiting in it (an input that
had nothing before a stop, a partition a rate-limited batch leaves for later).
:meth:`WaitingInput.unread` finds those with records past where Spark's next batch
begins reading them (its offset log), and the clock holds the watermark back for them
until a batch brings their first event time (:func:`~window_operator.kernel.clock.fold_clock`'s
``unread``).

Not covered: a partition of a checkpoint older than the driver's record of ranges read
(it is not asked for: idle as before), and one whose records wait behind an open
transaction (the last stable offset stays where the job read: it may go idle, and its
records be late once the transaction commits). When the broker does not answer, the
partitions that were active stay active and the idle ones stay idle (a partition
without an event time that held the watermark back still does; none is newly found).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from window_operator.kafka_admin import KafkaAdmin, KafkaAdminError
from window_operator.kernel import ClockState
from window_operator.kernel.positions import InputPosition
from window_operator.policies import NO_WATERMARK
from window_operator.runtime.exchange import InputRange
from window_operator.runtime.plan import SourceSpec

__all__ = ["WaitingInput"]

log = logging.getLogger(__name__)


class WaitingInput:
    """Asks, before the job clock moves on, which read partitions have records waiting."""

    def __init__(self, admin: KafkaAdmin, idle_timeout: int | None) -> None:
        """``admin``: where to ask (a batch or timer pass waits for its answer: bound its
        requests as a metadata request's)."""
        self.admin = admin
        self.idle_timeout = idle_timeout

    def partitions(
        self, clock: ClockState, ends: Mapping[InputPosition, InputRange]
    ) -> list[InputPosition]:
        """The partitions of ``clock`` with records after their last range read
        (``ends``): active at the clock's next move. Without an idle timeout the broker
        is not asked: no partition can be idle."""
        if self.idle_timeout is None:
            return []
        read = [ends[pos] for pos in sorted(clock.max_ts) if pos in ends]
        if not read:
            return []
        try:
            latest = self.admin.list_offsets([(r.topic, r.partition) for r in read], earliest=False)
        except KafkaAdminError as exc:
            log.debug("input ends not known, no partition goes idle now: %s", exc)
            return [r.position for r in read if self._was_active(clock, r.position)]
        return [r.position for r in read if latest.get((r.topic, r.partition), 0) > r.end]

    def unread(
        self,
        clock: ClockState,
        sources: Sequence[SourceSpec],
        starts: Mapping[tuple[str, int], int],
    ) -> list[InputPosition]:
        """The partitions of the inputs ``sources`` that have no event time in ``clock``
        and records past where the next batch begins reading them (``starts``, from
        Spark's offset log; a partition it does not name is new, read from its earliest
        offset). When the broker does not answer, the partitions ``clock`` already holds
        the watermark back for stay so."""
        try:
            counts = self.admin.partition_counts(sorted({s.topic for s in sources}))
            positions = [
                (InputPosition(s.index, p), (s.topic, p))
                for s in sources
                for p in range(counts.get(s.topic, 0))
                if clock.max_ts.get(InputPosition(s.index, p), NO_WATERMARK) <= NO_WATERMARK
            ]
            asked = sorted({tp for _, tp in positions})
            latest = self.admin.list_offsets(asked, earliest=False)
            new = [tp for tp in asked if tp not in starts]
            first = {**self.admin.list_offsets(new, earliest=True), **starts}
        except KafkaAdminError as exc:
            log.debug("input ends not known, no unread partition changes now: %s", exc)
            return sorted(p for p, t in clock.max_ts.items() if t <= NO_WATERMARK)
        return [pos for pos, tp in positions if latest.get(tp, 0) > first.get(tp, 0)]

    def _was_active(self, clock: ClockState, pos: InputPosition) -> bool:
        """Whether ``pos`` was not idle at the clock's last move."""
        assert self.idle_timeout is not None
        if clock.first_wall is None:
            return True
        return clock.now < clock.last_active.get(pos, clock.first_wall) + self.idle_timeout
