"""The event-time clock: coalesced watermark over partitions and sources, idleness."""

from __future__ import annotations

import numpy as np

from window_operator.kernel import ClockState, EventClock, InputPosition
from window_operator.kernel.clock import PartitionActivity, fold_clock
from window_operator.policies import END_OF_TIME, NO_WATERMARK

S = 1000


def arr(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_the_watermark_is_the_slowest_partition_minus_the_lateness() -> None:
    clock = EventClock(sources=1, allowed_lateness=2 * S, idle_timeout=None)
    clock.observe(0, arr(0, 1, 0), arr(10 * S, 4 * S, 12 * S))
    assert clock.coalesced() == 4 * S - 2 * S
    assert clock.advance(clock.coalesced()) == NO_WATERMARK
    assert clock.advance(1 * S) is None  # never backwards


def test_an_idle_partition_stops_holding_the_watermark_back() -> None:
    #   partition 0: active at wall 100 s (event time 50 s)
    #   partition 1: active at wall 100 s (event time 10 s), then silent
    clock = EventClock(sources=1, allowed_lateness=0, idle_timeout=30 * S)
    clock.note_wall(0, arr(0, 1), arr(100 * S, 100 * S))
    clock.observe(0, arr(0, 1), arr(50 * S, 10 * S))
    assert clock.coalesced() == 10 * S
    clock.note_active(0, 0, 125 * S)
    assert clock.coalesced() == 10 * S  # partition 1 silent for 25 s: not idle yet
    clock.note_now(131 * S)
    assert clock.coalesced() == 50 * S


def test_a_timer_pass_moves_the_wall_clock_on_and_the_end_of_time_ends_it() -> None:
    clock = EventClock(sources=1, allowed_lateness=0, idle_timeout=None)
    assert clock.tick(5 * S) is False and (clock.first_wall, clock.now) == (5 * S, 5 * S)
    assert clock.tick(3 * S) is False and clock.now == 5 * S  # never backwards
    assert clock.tick(END_OF_TIME) is True and clock.now == END_OF_TIME
    assert clock.tick(END_OF_TIME + 1) is True and clock.now == END_OF_TIME


def test_a_join_waits_for_both_inputs() -> None:
    clock = EventClock(sources=2, allowed_lateness=0, idle_timeout=None)
    clock.observe_one(0, 0, 30 * S)
    assert clock.coalesced() == NO_WATERMARK  # the right input sent nothing yet
    clock.observe_one(1, 0, 20 * S)
    assert clock.coalesced() == 20 * S


def test_the_driver_fold_matches_a_clock_fed_by_the_records() -> None:
    before = ClockState()
    activity = [
        PartitionActivity(InputPosition(0, 0), 5, 40 * S),
        PartitionActivity(InputPosition(0, 1), 3, 30 * S),
        PartitionActivity(InputPosition(0, 2), 2, None),  # all rejected
    ]
    after = fold_clock(
        before, activity, 1_000 * S, sources=1, allowed_lateness=S, idle_timeout=None
    )
    assert after.watermark == 29 * S
    assert set(after.last_active) == {InputPosition(0, p) for p in range(3)}
    # adopting it: the operator's clock no longer moves with records
    clock = EventClock(sources=1, allowed_lateness=S, idle_timeout=None)
    assert clock.adopt(after) == 29 * S
    clock.observe_one(0, 0, 99 * S)
    assert clock.max_ts[InputPosition(0, 0)] == 40 * S


def test_merged_clocks_take_the_later_figure_of_each() -> None:
    """How a long-running job's driver joins its workers' reports: per partition the
    larger event time and activity, the later watermark and wall clock, the first start."""
    p0, p1, p2 = (InputPosition(0, p) for p in range(3))
    ahead = ClockState({p0: 50 * S, p1: 40 * S}, {p0: 9 * S}, 10 * S, 2 * S, 35 * S)
    behind = ClockState({p0: 45 * S, p2: 7 * S}, {p0: 8 * S, p2: 3 * S}, 9 * S, 1 * S, 30 * S)
    want = ClockState(
        {p0: 50 * S, p1: 40 * S, p2: 7 * S}, {p0: 9 * S, p2: 3 * S}, 10 * S, 1 * S, 35 * S
    )
    assert ahead.merged(behind) == behind.merged(ahead) == want
    assert ClockState().merged(ahead) == ahead.merged(ClockState()) == ahead


def test_a_partition_waiting_unread_holds_the_watermark_until_a_batch_reads_it() -> None:
    """A partition never read has no event time: it did not count, and the others moved
    the watermark past the records waiting in it (a rate-limited first batch, an input
    that had nothing before a stop)."""
    p0, p1 = InputPosition(0, 0), InputPosition(0, 1)
    fold = {"sources": 1, "allowed_lateness": 0, "idle_timeout": 30 * S}
    read = fold_clock(ClockState(), [PartitionActivity(p0, 1, 40 * S)], 100 * S, **fold)
    assert read.watermark == 40 * S  # partition 1 was not known to wait
    begin = fold_clock(ClockState(), [], 100 * S, unread=[p0, p1], **fold)
    after = fold_clock(begin, [PartitionActivity(p0, 1, 40 * S)], 100 * S, **fold)
    assert after.max_ts == {p0: 40 * S, p1: NO_WATERMARK}
    assert after.watermark == NO_WATERMARK  # partition 1 waits: it holds it back
    # a batch read some of it and brought an event time: it counts by its event times
    read_too = fold_clock(after, [PartitionActivity(p1, 1, 20 * S)], 101 * S, **fold)
    assert read_too.max_ts == {p0: 40 * S, p1: 20 * S} and read_too.watermark == 20 * S
    # a batch read only rejected records of it (rate-limited: more may wait behind them):
    # it still holds the watermark back, until the driver finds nothing waiting there
    rejected = fold_clock(after, [PartitionActivity(p1, 2, None)], 101 * S, **fold)
    assert rejected.max_ts == after.max_ts and rejected.watermark == NO_WATERMARK
    drained = fold_clock(rejected, [], 102 * S, unread=[], **fold)
    assert drained.max_ts == {p0: 40 * S} and drained.watermark == 40 * S
    # an unread partition that stays unread goes idle like any other, unless found
    # waiting again (before every batch and timer pass)
    assert fold_clock(after, [], 131 * S, **fold).watermark == 40 * S
    assert fold_clock(after, [], 131 * S, unread=[p1], **fold).watermark == NO_WATERMARK
    # nothing waits in it any more (say, its topic was made anew): the stand-in goes
    assert fold_clock(after, [], 101 * S, unread=[], **fold).max_ts == {p0: 40 * S}
    # a partition with an event time is not reset by being named unread
    assert fold_clock(after, [], 101 * S, unread=[p0], **fold).max_ts[p0] == 40 * S
