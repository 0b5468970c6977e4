"""A task's clock across epochs of chunks from several workers (TaskClock)."""

from __future__ import annotations

from pathlib import Path

from jobkit import job_config

from window_operator.kernel import ClockState, InputPosition
from window_operator.policies import NO_WATERMARK
from window_operator.runtime.exchange import InputRange, MapReport
from window_operator.runtime.longrun.inbox import Inbox, Part, TaskClock, merge_reports
from window_operator.runtime.longrun.wire import Held, Kind
from window_operator.runtime.settings import TaskSettings

P0, P1 = InputPosition(0, 0), InputPosition(0, 1)
NOW = 1_700_000_000_000


def settings(tmp: Path) -> TaskSettings:
    config = job_config(tmp, "t", "job", watermark={"allowed_lateness": "0s"})
    return TaskSettings(config, "unused:9092", str(tmp), tasks=2)


def part(p: int, start: int, end: int, max_ts: int | None, *, last: bool = False) -> Part:
    """A chunk of partition ``p`` (``last``: its reader reached the end with it)."""
    report = MapReport(InputRange(0, "t", p, start, end), end - start, max_ts)
    return Part(report, None, (), at_end=last)


def at_end(p: int, offset: int) -> Part:
    """A reader's word that it read partition ``p`` to its end (at ``offset``)."""
    return Part(MapReport(InputRange(0, "t", p, offset, offset), 0, None), None, ())


def test_the_watermark_waits_for_every_partition_with_input(tmp_path: Path) -> None:
    # partition 0's chunks arrive first (its worker is ahead); partition 1's next epoch
    clock = TaskClock.waiting_for(settings(tmp_path), 0, ClockState(), {P0, P1})
    e0 = clock.epoch(0, [part(0, 0, 10, 5_000), part(0, 10, 20, 9_000)], NOW)
    assert e0.clock_after.watermark == NO_WATERMARK  # partition 1 not seen yet
    assert [(r.partition, r.start, r.end) for r in e0.ranges] == [(0, 0, 20)]
    clock.advance(e0)
    e1 = clock.epoch(1, [part(1, 0, 10, 7_000)], NOW)
    # partition 1's rows are decided with the clock before them: still held back
    assert e1.clock_before.watermark == NO_WATERMARK
    assert e1.clock_after.watermark == 7_000  # min(9_000, 7_000), lateness 0
    clock.advance(e1)
    assert clock.unseen == set()


def test_a_partition_whose_records_carry_no_event_time_stops_holding_it_back(
    tmp_path: Path,
) -> None:
    clock = TaskClock.waiting_for(settings(tmp_path), 0, ClockState(), {P0, P1})
    e0 = clock.epoch(0, [part(0, 0, 10, 5_000), part(1, 0, 3, None)], NOW)  # all rejected
    assert e0.clock_after.watermark == 5_000


def test_a_restored_clock_waits_only_for_partitions_it_has_not_seen(tmp_path: Path) -> None:
    restored = ClockState(max_ts={P0: 8_000}, watermark=8_000)
    clock = TaskClock.waiting_for(settings(tmp_path), 1, restored, {P0, P1})
    assert clock.unseen == {P1}
    assert clock.state.max_ts == {P0: 8_000, P1: NO_WATERMARK}


def test_reports_of_consecutive_chunks_merge() -> None:
    a = MapReport(InputRange(0, "t", 2, 0, 10), 10, 100, {"BAD_JSON": 1}, 0.5, 0.1)
    b = MapReport(InputRange(0, "t", 2, 10, 25), 14, None, {"BAD_JSON": 2, "X": 1}, 0.25, 0.1)
    m = merge_reports(a, b)
    assert (m.range.start, m.range.end, m.records, m.max_ts) == (0, 25, 24, 100)
    assert m.rejected == {"BAD_JSON": 3, "X": 1}


def restarted_an_hour_later(tmp: Path) -> TaskClock:
    """A task clock restored an hour after both partitions last brought records (at
    10 s of event time; idle timeout 10 s), with input waiting in both."""
    config = job_config(
        tmp, "t", "job", watermark={"allowed_lateness": "0s", "idle_timeout": "10s"}
    )
    hour = 3_600_000
    restored = ClockState(
        max_ts={P0: 10_000, P1: 10_000},
        last_active={P0: NOW - hour, P1: NOW - hour},
        now=NOW - hour,
        first_wall=NOW - 2 * hour,
        watermark=10_000,
    )
    task_settings = TaskSettings(config, "unused:9092", str(tmp), tasks=2)
    return TaskClock.waiting_for(task_settings, 0, restored, {P0, P1})


def test_a_partition_waiting_for_its_first_chunk_is_not_idle_after_a_long_stop(
    tmp_path: Path,
) -> None:
    """A restart an hour after the last epoch: partition 1's records wait, but its first
    chunk comes an epoch after partition 0's (another worker reads it). Before, its last
    activity was an hour old, it was idle, and the watermark jumped to partition 0's
    event times: partition 1's waiting records were late."""
    clock = restarted_an_hour_later(tmp_path)
    e0 = clock.epoch(0, [part(0, 0, 10, 90_000), at_end(0, 10)], NOW)
    assert e0.clock_before.watermark == 10_000 and e0.clock_after.watermark == 10_000
    clock.advance(e0)
    e1 = clock.epoch(1, [part(1, 0, 10, 20_000, last=True)], NOW + 1_000)
    assert e1.clock_before.watermark == 10_000  # partition 1's rows judged before it moves
    assert e1.clock_after.watermark == 20_000
    clock.advance(e1)
    assert clock.pending == set()
    # with nothing waiting any more, a partition that brings nothing does go idle
    e2 = clock.epoch(2, [part(0, 10, 20, 95_000)], NOW + 20_000)
    assert e2.clock_after.watermark == 95_000


def test_a_partition_whose_reader_found_no_record_to_read_stops_waiting(
    tmp_path: Path,
) -> None:
    """Only a commit marker waited in partition 1 (its input is another job's output):
    no chunk of it ever comes. Its reader's word that it read it to its end (a report
    spanning no offset) ends its wait, and it goes idle as any partition would."""
    clock = restarted_an_hour_later(tmp_path)
    e0 = clock.epoch(0, [part(0, 0, 10, 90_000)], NOW)
    assert e0.clock_after.watermark == 10_000  # partition 1 may still bring records
    clock.advance(e0)
    e1 = clock.epoch(1, [at_end(1, 7), part(0, 10, 20, 95_000), at_end(0, 20)], NOW + 1_000)
    assert clock.pending == set()
    assert [(r.partition, r.start, r.end) for r in e1.ranges] == [(0, 10, 20)]  # no position
    clock.advance(e1)
    # waiting for nothing, it is idle once the timeout passed since it last counted
    e2 = clock.epoch(2, [part(0, 20, 30, 99_000)], NOW + 12_000)
    assert e2.clock_after.watermark == 99_000


def test_a_partition_its_reader_is_slow_to_come_back_to_is_not_idle(tmp_path: Path) -> None:
    """Partition 1 brought a chunk, and its reader has not reached its end since (it is
    busy with others, or its worker is held back): records may wait in it, so it holds
    the watermark however long no chunk of it comes. Before, it went idle once the
    timeout passed since its last chunk, and the records behind it were late."""
    clock = restarted_an_hour_later(tmp_path)
    e0 = clock.epoch(0, [part(0, 0, 10, 90_000), at_end(0, 10), part(1, 0, 10, 20_000)], NOW)
    assert e0.clock_after.watermark == 20_000
    clock.advance(e0)
    assert clock.pending == {P1}
    e1 = clock.epoch(1, [part(0, 10, 20, 95_000), at_end(0, 20)], NOW + 60_000)
    assert e1.clock_after.watermark == 20_000  # a minute without a chunk of partition 1
    clock.advance(e1)
    # its reader reached its end: nothing waits, and it goes idle once the timeout passed
    e2 = clock.epoch(2, [at_end(1, 25)], NOW + 65_000)
    assert e2.clock_after.watermark == 20_000
    clock.advance(e2)
    e3 = clock.epoch(3, [part(0, 20, 30, 99_000)], NOW + 75_000)
    assert e3.clock_after.watermark == 99_000


def test_a_partition_whose_reader_is_held_back_does_not_go_idle(tmp_path: Path) -> None:
    """Partition 1 was read to its end; then its worker was held back (slower receivers)
    for a minute while records came into it. Its reader's word that it is held back
    keeps it active, so the watermark waits for those records. Before, it went idle
    after the timeout and its records, read once the worker went on, were late."""
    clock = restarted_an_hour_later(tmp_path)
    e0 = clock.epoch(0, [part(0, 0, 10, 90_000), part(1, 0, 10, 20_000, last=True)], NOW)
    assert e0.clock_after.watermark == 20_000
    clock.advance(e0)
    assert P1 not in clock.pending  # read to its end
    held = frozenset({P1})
    for k in range(1, 7):  # an epoch every 10 s, each bringing the held word
        ek = clock.epoch(k, [part(0, 10 * k, 10 * k + 10, 90_000 + k)], NOW + 10_000 * k, held)
        assert ek.clock_after.watermark == 20_000
        clock.advance(ek)
    # the worker goes on: the records that came in the meantime are on time
    e7 = clock.epoch(7, [part(1, 10, 20, 25_000, last=True)], NOW + 70_000)
    assert e7.clock_before.watermark == 20_000
    assert e7.clock_after.watermark == 25_000
    clock.advance(e7)
    # and with no word, it goes idle once the timeout passed since it last counted
    e8 = clock.epoch(8, [part(0, 70, 80, 99_000)], NOW + 81_000)
    assert e8.clock_after.watermark == 99_000


def test_without_the_held_word_the_partition_goes_idle(tmp_path: Path) -> None:
    """The same minute without the word: partition 1 goes idle after the timeout."""
    clock = restarted_an_hour_later(tmp_path)
    e0 = clock.epoch(0, [part(0, 0, 10, 90_000), part(1, 0, 10, 20_000, last=True)], NOW)
    clock.advance(e0)
    e1 = clock.epoch(1, [part(0, 10, 20, 90_001)], NOW + 11_000)
    assert e1.clock_after.watermark == 90_001


def test_the_inbox_hands_over_held_words_once() -> None:
    inbox = Inbox([0, 1])
    inbox.deliver(1, Kind.HELD, Held((P0, P1)), 0)
    inbox.deliver(2, Kind.HELD, Held((InputPosition(1, 0),)), 0)
    got = inbox.take()
    assert got.held == {P0, P1, InputPosition(1, 0)}
    assert got.parts == {0: [], 1: []} and got.received == {}
    assert inbox.take().held == frozenset()
