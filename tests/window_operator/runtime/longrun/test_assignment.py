"""Who does what in a long-running job, and where its input starts."""

from __future__ import annotations

from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputPartition
from window_operator.runtime.longrun.assignment import Assignment, WorkerStart, start_offsets

P = [InputPartition(0, "a", p) for p in range(5)] + [InputPartition(1, "b", 0)]


def test_tasks_and_partitions_are_dealt_in_turn() -> None:
    a = Assignment.spread(2, 5, P)
    assert a.tasks == ((0, 2, 4), (1, 3))
    assert a.inputs == ((P[0], P[2], P[4]), (P[1], P[3], P[5]))
    assert [a.worker_of(t) for t in range(5)] == [0, 1, 0, 1, 0]
    assert sorted(a.partitions, key=lambda p: (p.source, p.partition)) == P
    assert a.partition_counts() == {"a": 5, "b": 1}


def test_more_workers_than_partitions_leaves_some_without_input() -> None:
    a = Assignment.spread(3, 3, P[:2])
    assert a.inputs == ((P[0],), (P[1],), ())
    assert a.tasks == ((0,), (1,), (2,))


def test_input_starts_after_the_lowest_position_any_task_holds() -> None:
    a0, a1 = InputPosition(0, 0), InputPosition(0, 1)
    starts = [
        WorkerStart("h:1", {0: {a0: 99, a1: 10}, 2: {a0: 40, a1: 50}}),
        WorkerStart("h:2", {1: {a0: 70}}),  # task 1 has never committed partition a1
    ]
    first = {a0: 0, a1: 5}
    # a0: tasks at 99, 40, 70 -> from 41; a1: tasks at 10, 50 and one at the start -> 5
    assert start_offsets(P[:2], starts, first) == {a0: 41, a1: 5}
    # a job without state starts where the job's starting offsets say
    fresh = [WorkerStart("h:1", {0: {}}), WorkerStart("h:2", {1: {}})]
    assert start_offsets(P[:2], fresh, first) == first


def test_state_keyed_by_partition_starts_after_its_owner_alone() -> None:
    """Offset windows and tuple sessions: only the task owning a partition holds its
    position (partition mod tasks); the others must not pull its start back to the
    job's first offset (every restart would read the whole history again)."""
    a0, a1 = InputPosition(0, 0), InputPosition(0, 1)
    starts = [
        WorkerStart("h:1", {0: {a0: 99}}),  # task 0 owns partition 0
        WorkerStart("h:2", {1: {a1: 50}}),  # task 1 owns partition 1
    ]
    first = {a0: 0, a1: 5}
    assert start_offsets(P[:2], starts, first) == first  # every task counts: the start
    assert start_offsets(P[:2], starts, first, lambda p: p % 2) == {a0: 100, a1: 51}
    # an owner that never committed the partition reads it from the job's start
    assert start_offsets(P[:2], [WorkerStart("h:1", {0: {}})], first, lambda p: 0) == first


def test_worker_start_survives_the_gather_as_json() -> None:
    start = WorkerStart("10.0.0.7:4242", {3: {InputPosition(1, 2): 17}, 5: {}})
    assert WorkerStart.from_json(start.to_json()) == start
