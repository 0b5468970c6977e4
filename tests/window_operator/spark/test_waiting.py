"""Which read input partitions have records waiting, asked of a real broker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from jobkit import create_topic, produce

from window_operator.broker import free_port
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kernel import ClockState, InputPosition
from window_operator.policies import NO_WATERMARK
from window_operator.runtime.exchange import InputRange
from window_operator.runtime.plan import SourceSpec
from window_operator.spark.waiting import WaitingInput


def unreachable_admin() -> KafkaAdmin:
    """A client of a port where no broker listens, that gives up after 1 s."""
    return KafkaAdmin(f"127.0.0.1:{free_port()}", metadata_timeout_s=1.0, request_timeout_s=1.0)


@pytest.mark.kafka
def test_a_partition_read_to_its_end_may_be_idle_one_with_records_waiting_is_active(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("waiting")
    create_topic(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, [], raw=[(b"k", b"{}", p) for p in (0, 0, 1, 1, 1)])
    p0, p1, p2 = (InputPosition(0, p) for p in range(3))
    # partition 0 read to its end (2), partition 1 only to 1 of 3; partition 2 never read
    ends = {p0: InputRange(0, topic, 0, 0, 2), p1: InputRange(0, topic, 1, 0, 1)}
    clock = ClockState(max_ts={p0: 10, p1: 20})
    waiting = WaitingInput(KafkaAdmin(kafka_bootstrap), idle_timeout=1_000)
    assert waiting.partitions(clock, ends) == [p1]
    # no idle timeout: no partition can be idle, and the broker is not asked
    assert (
        WaitingInput(KafkaAdmin(kafka_bootstrap), idle_timeout=None).partitions(clock, ends) == []
    )
    assert waiting.partitions(ClockState(), ends) == []
    assert p2 not in ends


def test_no_partition_is_taken_for_idle_when_the_broker_does_not_answer() -> None:
    topic = "t"
    p0 = InputPosition(0, 0)
    ends = {p0: InputRange(0, topic, 0, 0, 2)}
    unreachable = WaitingInput(unreachable_admin(), 1_000)
    # a clock that never moved: nothing is idle yet
    assert unreachable.partitions(ClockState(max_ts={p0: 10}), ends) == [p0]


def test_when_the_broker_does_not_answer_an_idle_partition_stays_idle() -> None:
    """Before, every partition was taken as active: one slow answer brought a partition
    idle for an hour back into the watermark, which then stood still."""
    p0, p1 = InputPosition(0, 0), InputPosition(0, 1)
    ends = {p0: InputRange(0, "t", 0, 0, 2), p1: InputRange(0, "t", 1, 0, 5)}
    now = 1_800_000_000_000
    clock = ClockState(
        max_ts={p0: 10, p1: 20},
        last_active={p0: now - 3_600_000, p1: now - 500},
        now=now,
        first_wall=now - 7_200_000,
    )
    unreachable = WaitingInput(unreachable_admin(), 1_000)
    assert unreachable.partitions(clock, ends) == [p1]


@pytest.mark.kafka
def test_the_partitions_without_an_event_time_and_records_waiting_are_found_per_input(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    left, right = unique_name("unread-left"), unique_name("unread-right")
    create_topic(kafka_bootstrap, left, 3)
    create_topic(kafka_bootstrap, right, 2)
    produce(kafka_bootstrap, left, [], raw=[(b"k", b"{}", p) for p in (0, 1, 1)])
    produce(kafka_bootstrap, right, [], raw=[(b"k", b"{}", 1)])
    sources = [SourceSpec(0, "left", left), SourceSpec(1, "right", right)]
    l0, l1, r0, r1 = (
        InputPosition(0, 0),
        InputPosition(0, 1),
        InputPosition(1, 0),
        InputPosition(1, 1),
    )
    waiting = WaitingInput(KafkaAdmin(kafka_bootstrap), idle_timeout=None)
    # partitions the offset log does not name yet are read from their earliest offset;
    # partition 2 of the left input and 0 of the right hold nothing
    assert waiting.unread(ClockState(), sources, {}) == [l0, l1, r1]
    # where the next batch begins reading: all of partition 1 read, or one record of it
    assert waiting.unread(ClockState(), sources, {(left, 1): 2}) == [l0, r1]
    assert waiting.unread(ClockState(), sources, {(left, 1): 1}) == [l0, l1, r1]
    # a partition with an event time counts by it; one held back for still is found
    clock = ClockState(max_ts={l0: 5_000, r1: NO_WATERMARK})
    assert waiting.unread(clock, sources, {}) == [l1, r1]
    # one topic as both inputs (a self-join): each input reads its one range of it
    both = [SourceSpec(0, "left", left), SourceSpec(1, "right", left)]
    assert waiting.unread(ClockState(), both, {}) == [l0, l1, r0, r1]
    assert waiting.unread(ClockState(), both, {(left, 0): 1}) == [l1, r1]


def test_when_the_broker_does_not_answer_the_partitions_held_back_for_stay_so() -> None:
    p0, p1 = InputPosition(0, 0), InputPosition(0, 1)
    waiting = WaitingInput(unreachable_admin(), 1_000)
    clock = ClockState(max_ts={p0: 5_000, p1: NO_WATERMARK})
    assert waiting.unread(clock, [SourceSpec(0, "events", "t")], {}) == [p1]
