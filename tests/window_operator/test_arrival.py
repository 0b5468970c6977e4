"""The far-future guard: which events are too far ahead of their arrival."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from window_operator.arrival import ArrivalClock, future_mask, reject_future
from window_operator.codecs import JsonPayloadDecoder, decode_payloads
from window_operator.events import RecordDecoder

DAY = 86_400_000


def arr(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def test_kafka_timestamps_bound_event_times() -> None:
    ts = arr([1_000, 1_000 + DAY, 1_001 + DAY, 5 * DAY])
    arrival = arr([1_000, 1_000, 1_000, -1])  # the last record has no timestamp
    assert future_mask(ts, arrival, DAY).tolist() == [False, False, True, False]


def test_lines_without_wall_ms_arrive_at_the_simulated_clock() -> None:
    #   ts:   0      10     3000(!)  20     30
    #   clock: -     0      10       10     20      (the far-future line does not move it)
    clock = ArrivalClock(max_future=100)
    check = clock.check(arr([0, 10, 3_000, 20, 30]), arr([-1] * 5))
    assert check.mask.tolist() == [False, False, True, False, False]
    assert check.arrival.tolist()[1:] == [0, 10, 10, 20]
    assert clock.now == 30
    # the clock carries over to the next chunk
    assert clock.check(arr([131, 130]), arr([-1, -1])).mask.tolist() == [True, False]


def test_wall_ms_is_the_arrival_time_and_always_moves_the_clock() -> None:
    clock = ArrivalClock(max_future=100)
    check = clock.check(arr([500, 5_000, 150]), arr([1_000, 1_000, -1]))
    assert check.mask.tolist() == [False, True, False]
    assert clock.now == 1_000


def test_off_checks_nothing() -> None:
    clock = ArrivalClock(max_future=None)
    assert not clock.check(arr([0, 10**12]), arr([-1, 0])).mask.any()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(10**6), 10**6), st.one_of(st.just(-1), st.integers(0, 10**6))),
        max_size=40,
    ),
    st.integers(1, 40),
    st.integers(0, 10**5),
)
def test_the_verdicts_do_not_depend_on_the_batch_size(
    rows: list[tuple[int, int]], size: int, max_future: int
) -> None:
    ts = arr([t for t, _ in rows])
    wall = arr([w for _, w in rows])
    whole = ArrivalClock(max_future).check(ts, wall).mask.tolist()
    clock = ArrivalClock(max_future)
    parts = [
        clock.check(ts[i : i + size], wall[i : i + size]).mask.tolist()
        for i in range(0, len(rows), size)
    ]
    assert [m for part in parts for m in part] == whole
    # and equal a line-by-line reading of the rule
    now = None
    expected = []
    for t, w in rows:
        at = w if w >= 0 else now
        bad = at is not None and t - at > max_future
        expected.append(bad)
        if w >= 0 or not bad:
            moved = w if w >= 0 else t
            now = moved if now is None else max(now, moved)
    assert whole == expected


def test_reject_future_keeps_one_verdict_per_input_in_order() -> None:
    decoder = RecordDecoder(key_field="k", timestamp_field="ts", numeric_fields=["v"])
    payloads: list[bytes | None] = [
        b'{"k":"a","ts":1000,"v":1}',
        b"broken",
        b'{"k":"a","ts":32503680000000,"v":1}',  # the year 3000
        b'{"k":"a","ts":2000,"v":1}',
    ]
    decoded = decode_payloads(
        payloads, JsonPayloadDecoder(), decoder, partitions=[3] * 4, offsets=[10, 11, 12, 13]
    )
    arrival = arr([5_000, 5_000, 5_000])
    out = reject_future(decoded, arrival, DAY, raws=payloads, topic="in")
    assert out.kept == [0, 3] and out.batch.ts.tolist() == [1_000, 2_000]
    assert [(e.code.value, e.offset) for e in out.errors] == [
        ("BAD_JSON", 11),
        ("FUTURE_TIMESTAMP", 12),
    ]
    future = out.errors[1]
    assert future.raw == payloads[2] and future.topic == "in" and future.partition == 3
    assert "watermark.max_future" in future.reason and "3000-01-01" in future.reason
    assert reject_future(decoded, arrival, None, raws=payloads) is decoded


def test_a_far_future_time_in_the_wrong_unit_is_said_to_be_and_dated() -> None:
    """A seconds job fed milliseconds: the time is 1000 times the arrival time. Before,
    the reason showed the time as "1700000000000000 (1700000000000000 ms)", no date,
    and no word of the unit."""
    from window_operator.arrival import future_error
    from window_operator.kernel.records import retention_error

    arrival = 1_700_000_000_000
    _, reason = future_error(arrival * 1000, arrival, 3_600_000)
    assert "(past the year 9999)" in reason
    assert "it is 1,000 times the arrival time: is input.timestamp_unit too coarse" in reason
    _, plain = future_error(arrival + 7_200_000, arrival, 3_600_000)
    assert "times the arrival time" not in plain and "2023-11-14T" in plain
    err = retention_error(
        ts=0, key="k", what="its window ended", retention=20_000, watermark=arrival,
        partition=0, offset=1,
    )  # fmt: skip
    assert "(the retention: retention.time, or retention.size windows)" in err.reason
    assert err.reason.endswith("before the watermark 1700000000000 (2023-11-14T22:13:20.000+00:00)")
