"""The event-time clock of an operator: per input partition the largest event time and
the wall clock of its last activity, and the watermark they imply.

The watermark is Jet's coalescing: the minimum over the sources of the minimum over
their active partitions of the largest event time seen, minus the allowed lateness. A
partition with no activity for ``idle_timeout`` of wall clock stops holding it back; a
source that has delivered nothing holds it at :data:`NO_WATERMARK` until it has been
silent that long since the clock started; when every partition is idle the freshest one
leads. The watermark never goes backwards.

Standalone (``simulate``, library use) an operator feeds its clock from the records it
applies. In the Spark job a state task sees only some keys of every partition, so the
driver computes the clock of the whole job from the map side's reports and the task
*adopts* it (:meth:`EventClock.adopt`); from then on the records no longer move it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from window_operator.arrays import IntArray, distinct
from window_operator.kernel.positions import InputPosition, input_position
from window_operator.policies import END_OF_TIME, NO_WATERMARK

__all__ = ["ClockState", "EventClock", "PartitionActivity", "fold_clock"]


@dataclass(frozen=True, slots=True)
class ClockState:
    """The clock of a whole job at one moment (what the Spark driver logs per batch)."""

    max_ts: dict[InputPosition, int] = field(default_factory=dict)
    last_active: dict[InputPosition, int] = field(default_factory=dict)
    now: int = NO_WATERMARK
    first_wall: int | None = None
    watermark: int = NO_WATERMARK

    def merged(self, other: ClockState) -> ClockState:
        """The furthest of two views of one job's clock (each figure the later one): how
        the driver of a long-running job joins the clocks its workers report, so that
        what it shows never goes back when a worker's report trails another's."""
        if self.first_wall is None or other.first_wall is None:
            first_wall = self.first_wall if other.first_wall is None else other.first_wall
        else:
            first_wall = min(self.first_wall, other.first_wall)
        return ClockState(
            _latest(self.max_ts, other.max_ts),
            _latest(self.last_active, other.last_active),
            max(self.now, other.now),
            first_wall,
            max(self.watermark, other.watermark),
        )


def _latest(a: dict[InputPosition, int], b: dict[InputPosition, int]) -> dict[InputPosition, int]:
    out = dict(a)
    for pos, t in b.items():
        out[pos] = max(t, out.get(pos, t))
    return out


class EventClock:
    """Event and wall time per input partition; the coalesced, monotonic watermark."""

    __slots__ = (
        "allowed_lateness",
        "external",
        "first_wall",
        "idle_timeout",
        "last_active",
        "max_ts",
        "now",
        "sources",
        "watermark",
    )

    def __init__(self, *, sources: int, allowed_lateness: int, idle_timeout: int | None) -> None:
        self.sources = sources
        self.allowed_lateness = allowed_lateness
        self.idle_timeout = idle_timeout
        self.max_ts: dict[InputPosition, int] = {}
        self.last_active: dict[InputPosition, int] = {}
        self.now = NO_WATERMARK
        self.first_wall: int | None = None
        self.watermark = NO_WATERMARK
        #: Set once the clock of the whole job was adopted: records no longer move it.
        self.external = False

    # -- feeding it ---------------------------------------------------------------------

    def observe(self, source: int, part: IntArray, ts: IntArray) -> None:
        """Raise the largest event time of every partition by the applied ``ts``."""
        if self.external or not len(part):
            return
        for p in distinct(part):
            self.observe_one(source, p, int(ts[part == p].max()))

    def observe_one(self, source: int, partition: int, ts: int) -> None:
        """:meth:`observe` for one applied event."""
        if self.external:
            return
        pos = input_position(source, partition)
        if ts > self.max_ts.get(pos, NO_WATERMARK):
            self.max_ts[pos] = ts

    def note_now(self, now: int) -> None:
        """Advance the wall clock (the first reading starts it)."""
        if self.first_wall is None:
            self.first_wall = now
        if now > self.now:
            self.now = now

    def tick(self, now: int) -> bool:
        """A timer pass at wall clock ``now``: note it; whether it is :data:`END_OF_TIME`,
        the end of the input (the clock then stands there, whatever it read before)."""
        if now >= END_OF_TIME:
            self.now = END_OF_TIME
            return True
        self.note_now(now)
        return False

    def note_wall(self, source: int, part: IntArray, wall: IntArray) -> None:
        """Advance the wall clock and the last activity of every partition in ``part``."""
        if self.external or not len(part):
            return
        self.note_now(int(wall.min()))
        self.note_now(int(wall.max()))
        for p in distinct(part):
            self.note_active(source, p, int(wall[part == p].max()))

    def note_active(self, source: int, partition: int, wall: int) -> None:
        """Record that a partition was active at ``wall`` (and advance the wall clock)."""
        if self.external:
            return
        self.note_now(wall)
        pos = input_position(source, partition)
        if wall > self.last_active.get(pos, NO_WATERMARK):
            self.last_active[pos] = wall

    def adopt(self, state: ClockState) -> int:
        """Take the clock of the whole job; the watermark it implies (to :meth:`advance` to).

        The watermark itself is left to the operator, which fires what it passes.
        """
        self.external = True
        self.max_ts = dict(state.max_ts)
        self.last_active = dict(state.last_active)
        self.first_wall = state.first_wall
        self.now = max(self.now, state.now)
        return max(state.watermark, self.coalesced())

    def state(self) -> ClockState:
        """A snapshot (what a driver would log)."""
        return ClockState(
            dict(self.max_ts), dict(self.last_active), self.now, self.first_wall, self.watermark
        )

    # -- the watermark ------------------------------------------------------------------

    def coalesced(self) -> int:
        """Min over sources of min over active partitions of max event time, minus lateness."""
        if not self.max_ts:
            return NO_WATERMARK
        idle, now, started = self.idle_timeout, self.now, self.first_wall
        per_source: list[int] = []
        for source in range(self.sources):
            parts = [(pos, t) for pos, t in self.max_ts.items() if pos.source == source]
            if not parts:
                if idle is not None and started is not None and now >= started + idle:
                    continue  # silent since the clock started for longer than the timeout
                return NO_WATERMARK
            active = [
                t
                for pos, t in parts
                if idle is None
                or started is None
                or now < self.last_active.get(pos, started) + idle
            ]
            if active:
                per_source.append(min(active))
        if not per_source:  # everything idle: the freshest partition leads
            per_source = [max(self.max_ts.values())]
        return min(per_source) - self.allowed_lateness

    def advance(self, candidate: int) -> int | None:
        """Move the watermark up to ``candidate``; the previous value if it moved, else None."""
        if candidate <= self.watermark:
            return None
        before, self.watermark = self.watermark, candidate
        return before


@dataclass(frozen=True, slots=True)
class PartitionActivity:
    """What one micro-batch brought of one input partition (from the Spark map side).

    ``max_ts`` is the largest event time among its records that reached an operator
    (None: none did, e.g. all rejected); ``records`` counts every record read.
    """

    position: InputPosition
    records: int
    max_ts: int | None


def fold_clock(
    before: ClockState,
    activity: list[PartitionActivity],
    now: int,
    *,
    sources: int,
    allowed_lateness: int,
    idle_timeout: int | None,
    active: Iterable[InputPosition] = (),
    unread: Collection[InputPosition] | None = None,
) -> ClockState:
    """The job's clock after a micro-batch: ``before`` plus the batch's activity at ``now``;
    ``active``: partitions active at ``now`` that bring no event time here (records
    waiting, or read in the batch about to run), so not idle.

    ``unread``: the partitions with no event time yet (never read, or every record
    rejected) that have records waiting (None: as ``before`` has them). Without an event
    time they would not count, and the watermark could pass the records waiting in them
    (one input that had nothing before a stop, or a partition a rate-limited batch left
    for later). Each is entered at :data:`NO_WATERMARK` and active, so it holds the
    watermark back for as long as it is named (records wait in it). That stand-in is
    dropped once a batch brings the partition's first event time, or when it is not
    named any more (nothing waits in it now: a batch read only rejected records, say);
    with ``unread`` None, stand-ins stay as they are (and go idle like any partition).

    Pure and deterministic: the Spark driver and every state task compute the same
    clock from the same inputs, and a replayed batch computes it again identically.
    """
    clock = EventClock(
        sources=sources, allowed_lateness=allowed_lateness, idle_timeout=idle_timeout
    )
    clock.max_ts = dict(before.max_ts)
    clock.last_active = dict(before.last_active)
    clock.first_wall = before.first_wall
    clock.now = before.now
    clock.watermark = before.watermark
    clock.note_now(now)
    for pos in active:
        clock.note_active(pos.source, pos.partition, now)
    if unread is not None:
        for pos in [p for p, t in clock.max_ts.items() if t <= NO_WATERMARK]:
            if pos not in unread:
                del clock.max_ts[pos]
        for pos in unread:
            clock.max_ts.setdefault(pos, NO_WATERMARK)
            clock.note_active(pos.source, pos.partition, now)
    for a in activity:
        if a.max_ts is not None:
            if clock.max_ts.get(a.position) == NO_WATERMARK:
                del clock.max_ts[a.position]  # read: it counts by its event times now
            clock.observe_one(a.position.source, a.position.partition, a.max_ts)
        if a.records:
            clock.note_active(a.position.source, a.position.partition, now)
    clock.advance(clock.coalesced())
    return clock.state()
