"""The windowed aggregator on small timelines: the seed examples and every policy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import runtime_for

from stores.rocks import ColumnFamily
from window_operator.config import load_config
from window_operator.events import EventBatch
from window_operator.job import build_runtime
from window_operator.policies import END_OF_TIME
from window_operator.results import ErrorCode, Kind, WindowResult
from window_operator.timewindows import WindowedAggregator

OpenAgg = Callable[..., WindowedAggregator]
S = 1000
M = 60 * S


def mmss(text: str) -> int:
    """'1:25' -> milliseconds."""
    m, s = text.split(":")
    return (int(m) * 60 + int(s)) * S


def latest(results: list[WindowResult]) -> dict[tuple[str, int], WindowResult]:
    out: dict[tuple[str, int], WindowResult] = {}
    for r in results:
        out[(r.key, r.window_start)] = r
    return out


# The Jet example: 30 s windows sliding by 10 s, counting events. Frames (10 s):
#
#   frame   1:00      1:10    1:20      1:30      1:40
#   events  02 05 08 | 12 17 | 21 25 28 | 31 35 39 | 41 44 46 49
#   count   3          2       3          3          4
#
# Window [1:00, 1:30) holds 8 events ("at 1:30 the running rate was 8/30"), and
# window [1:20, 1:50) holds 10 ("20 s later it increased to 10/30").
JET_EVENTS = [
    "1:05", "1:02", "1:12", "1:08", "1:21", "1:17", "1:28", "1:25", "1:31",
    "1:39", "1:35", "1:44", "1:41", "1:49", "1:46",
]  # fmt: skip
JET_EXPECTED = {
    "0:40": 3, "0:50": 5, "1:00": 8, "1:10": 8, "1:20": 10, "1:30": 7, "1:40": 4,
}  # fmt: skip


def jet_runtime() -> Any:
    return runtime_for(
        window={"type": "hopping", "size": "30s", "step": "10s"},
        watermark={"allowed_lateness": "10s"},
    )


@pytest.mark.parametrize("use_deduct", [True, False])
@pytest.mark.parametrize("one_by_one", [True, False])
def test_jet_sliding_count_example(open_agg: OpenAgg, use_deduct: bool, one_by_one: bool) -> None:
    agg = open_agg(jet_runtime(), use_deduct=use_deduct)
    events = [{"k": "x", "ts": mmss(t)} for t in JET_EVENTS]
    if one_by_one:
        for e in events:
            agg.add_message(e)
    else:
        agg.add_batch(events)
    agg.timeout(END_OF_TIME)
    results = agg.get_result()
    # Every event arrived within the allowed lateness: one ON_TIME result per window.
    assert all(r.kind is Kind.ON_TIME and r.update_seq == 0 for r in results)
    got = {r.window_start: r.values["n"] for r in results}
    assert got == {mmss(t): n for t, n in JET_EXPECTED.items()}
    assert all(r.window_end - r.window_start == 30 * S for r in results)


def test_jet_windows_fire_as_the_watermark_passes(open_agg: OpenAgg) -> None:
    agg = open_agg(jet_runtime())
    for t in JET_EVENTS[:9]:  # up to 1:31: watermark 1:21
        agg.add_message({"k": "x", "ts": mmss(t)})
    fired = {r.window_start: r.values["n"] for r in agg.get_result()}
    # windows ending at or before 1:21 have fired: [0:40,1:10) and [0:50,1:20)
    assert fired == {mmss("0:40"): 3, mmss("0:50"): 5}


# The Samza "Orders" example: a 1-minute tumbling window computing max(value).
#   m1: offset 1, value 0, time 8:59:10, arrives 9:00:00
#   m2: offset 2, value 5, time 9:00:01, arrives 9:00:59
#   m3: offset 3, value 9, time 8:59:30, arrives 9:02:01  (late for the 8:59 window)
DAY = 1_700_006_400_000  # a midnight


def at(hh: int, mm: int, ss: int) -> int:
    return DAY + ((hh * 60 + mm) * 60 + ss) * S


ORDERS = [
    (1, 0, at(8, 59, 10), at(9, 0, 0)),
    (2, 5, at(9, 0, 1), at(9, 0, 59)),
    (3, 9, at(8, 59, 30), at(9, 2, 1)),
]


def test_samza_orders_max_late_m3_re_emits_the_8_59_window(open_agg: OpenAgg) -> None:
    runtime = build_runtime(load_config(Path("config/orders-max.yaml")))
    agg = open_agg(runtime)
    emitted: list[tuple[str, int, Any]] = []
    for offset, value, ts, wall in ORDERS:
        agg.add_message({"time": ts, "value": value}, offset=offset, wall_ms=wall)
        emitted += [(r.kind.value, r.window_start, r.values["max_value"]) for r in agg.get_result()]
    # m2 moves the watermark past 9:00: the 8:59 window is full (max 0); m3 then
    # re-emits it as LATE with max 9.
    assert emitted == [
        ("ON_TIME", at(8, 59, 0), 0),
        ("LATE", at(8, 59, 0), 9),
    ]
    agg.timeout(END_OF_TIME)
    final = agg.get_result()
    assert [(r.kind.value, r.window_start, r.values["max_value"]) for r in final] == [
        ("ON_TIME", at(9, 0, 0), 5)
    ]


def test_late_updates_are_batched_per_period_of_wall_clock(open_agg: OpenAgg) -> None:
    runtime = runtime_for(
        input={"timestamp": "time"},
        window={"type": "tumbling", "size": "1m"},
        aggregations=[{"name": "max_value", "op": "max", "field": "value"}],
        emit={"late": "1m"},
    )
    agg = open_agg(runtime)
    for offset, value, ts, wall in ORDERS:
        agg.add_message({"time": ts, "value": value}, offset=offset, wall_ms=wall)
        agg.timeout(wall)
    assert [r.kind for r in agg.get_result()] == [Kind.ON_TIME]
    agg.timeout(at(9, 2, 30))  # less than a minute after m3: still batched
    assert agg.get_result() == []
    agg.timeout(at(9, 3, 1))  # the late period is over
    (late,) = agg.get_result()
    assert (late.kind, late.window_start, late.update_seq, late.values["max_value"]) == (
        Kind.LATE,
        at(8, 59, 0),
        1,
        9,
    )


def test_late_off_updates_state_but_emits_nothing(open_agg: OpenAgg) -> None:
    agg = open_agg(runtime_for(emit={"late": "off"}))
    agg.add_batch([{"k": "a", "ts": 1 * S}, {"k": "a", "ts": 25 * S}])
    agg.add_message({"k": "a", "ts": 2 * S})
    assert [r.values["n"] for r in agg.get_result()] == [1]
    (window,) = agg.get_windows("a", 0, 10 * S)
    assert window.values["n"] == 2 and window.fired


def test_early_results_for_open_windows_then_on_time(open_agg: OpenAgg) -> None:
    runtime = runtime_for(emit={"early": "2s", "late": "per_arrival"})
    agg = open_agg(runtime)
    agg.add_message({"k": "a", "ts": 1 * S}, wall_ms=100 * S)
    agg.timeout(100 * S)  # starts the early clock
    agg.add_message({"k": "a", "ts": 2 * S}, wall_ms=101 * S)
    agg.timeout(102 * S)
    (early,) = agg.get_result()
    assert (early.kind, early.update_seq, early.values["n"]) == (Kind.EARLY, 0, 2)
    agg.timeout(104 * S)  # nothing changed since: no new EARLY result
    assert agg.get_result() == []
    agg.add_message({"k": "a", "ts": 3 * S}, wall_ms=105 * S)
    agg.timeout(106 * S)
    (early2,) = agg.get_result()
    assert (early2.kind, early2.update_seq, early2.values["n"]) == (Kind.EARLY, 1, 3)
    agg.add_message({"k": "a", "ts": 15 * S}, wall_ms=107 * S)  # closes [0, 10s)
    on_time = [r for r in agg.get_result() if r.window_start == 0]
    assert [(r.kind, r.update_seq, r.values["n"]) for r in on_time] == [(Kind.ON_TIME, 2, 3)]
    agg.add_message({"k": "a", "ts": 4 * S}, wall_ms=108 * S)
    (late,) = agg.get_result()
    assert (late.kind, late.update_seq, late.values["n"]) == (Kind.LATE, 3, 4)


def test_timeout_fires_windows_of_idle_partitions_without_new_messages(
    open_agg: OpenAgg,
) -> None:
    runtime = runtime_for(watermark={"idle_timeout": "30s"})
    agg = open_agg(runtime)
    agg.add_message({"k": "a", "ts": 1 * S}, partition=0, wall_ms=1000 * S)
    agg.add_message({"k": "b", "ts": 50 * S}, partition=1, wall_ms=1001 * S)
    # partition 0 holds the watermark at 1 s: nothing has fired
    assert agg.get_result() == []
    agg.timeout(1020 * S)
    assert agg.get_result() == []
    agg.timeout(1031 * S)  # partition 0 idle for 31 s: partition 1 leads alone
    assert {(r.key, r.window_start) for r in agg.get_result()} == {("a", 0)}


def test_replayed_messages_are_no_ops(open_agg: OpenAgg) -> None:
    agg = open_agg(runtime_for())
    events = [{"k": "a", "ts": t * S} for t in (1, 2, 11, 3, 25)]
    first = agg.add_batch(
        EventBatch.from_columns(
            [e["k"] for e in events], [e["ts"] for e in events], offset=range(5)
        )
    )
    assert first.applied == 5
    before = agg.get_result()
    again = agg.add_batch(
        EventBatch.from_columns(["a", "a", "a"], [1 * S, 2 * S, 11 * S], offset=[0, 1, 2])
    )
    assert (again.applied, again.replayed) == (0, 3)
    one = agg.add_message({"k": "a", "ts": 3 * S}, offset=3)
    assert one.replayed == 1
    agg.timeout(END_OF_TIME)
    final = latest(before + agg.get_result())
    assert {w: r.values["n"] for (_, w), r in final.items()} == {0: 3, 10 * S: 1, 20 * S: 1}


def test_duplicate_offsets_within_a_batch_are_replays(open_agg: OpenAgg) -> None:
    agg = open_agg(runtime_for())
    stats = agg.add_batch(
        EventBatch.from_columns(["a"] * 4, [1 * S, 2 * S, 2 * S, 3 * S], offset=[0, 1, 1, 2])
    )
    assert (stats.applied, stats.replayed) == (3, 1)


def test_out_of_retention_events_go_to_errors(open_agg: OpenAgg) -> None:
    agg = open_agg(runtime_for(retention={"time": "20s"}))
    agg.add_message({"k": "a", "ts": 100 * S})
    agg.add_message({"k": "a", "ts": 75 * S})  # window [70,80) ends 20 s before wm 100: gone
    agg.add_message({"k": "a", "ts": 81 * S})  # window [80,90): still retained
    (err,) = agg.get_errors()
    assert err.code is ErrorCode.OUT_OF_RETENTION
    assert "out of retention" in err.reason and err.offset == 1
    agg.timeout(END_OF_TIME)
    assert {r.window_start for r in agg.get_result()} == {80 * S, 100 * S}


def test_bad_records_get_error_records_and_processing_continues(open_agg: OpenAgg) -> None:
    runtime = runtime_for(aggregations=[{"name": "m", "op": "mean", "field": "v"}])
    agg = open_agg(runtime)
    records: list[Any] = [
        {"k": "a", "ts": 1 * S, "v": 1},
        {"k": "a", "v": 1},
        {"k": "a", "ts": "noon", "v": 1},
        {"ts": 2 * S, "v": 1},
        {"k": "a", "ts": 3 * S, "v": "x"},
        {"k": "a", "ts": 4 * S},
        {"k": {"nested": 1}, "ts": 4 * S, "v": 1},
        {"k": "a" * 5000, "ts": 4 * S, "v": 1},
        [1, 2],
        {"k": "a", "ts": 5 * S, "v": None},
        {"k": "a", "ts": 6 * S, "v": 3.0},
    ]
    stats = agg.add_batch(records)
    codes = [e.code for e in agg.get_errors()]
    assert codes == [
        ErrorCode.MISSING_TIMESTAMP,
        ErrorCode.BAD_TIMESTAMP,
        ErrorCode.MISSING_KEY,
        ErrorCode.WRONG_TYPE,
        ErrorCode.MISSING_FIELD,
        ErrorCode.BAD_KEY,
        ErrorCode.BAD_KEY,
        ErrorCode.NOT_AN_OBJECT,
    ]
    assert stats.applied == 3 and stats.rejected == 8
    agg.timeout(END_OF_TIME)
    (r,) = agg.get_result()
    assert r.values["m"] == 2.0  # null is ignored, as SQL aggregates do


def test_snapshot_restore_mid_stream_gives_the_same_results(tmp_path: Path) -> None:
    runtime = runtime_for(
        window={"type": "hopping", "size": "30s", "step": "10s"},
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "mean", "op": "mean", "field": "v"},
            {"name": "med", "op": "median", "field": "v"},
            {"name": "vals", "op": "collect", "field": "v"},
        ],
        watermark={"allowed_lateness": "5s"},
    )
    events = [
        {"k": k, "ts": t * S, "v": (t * 7) % 11}
        for t, k in [(1, "a"), (4, "b"), (12, "a"), (9, "a"), (25, "b"), (31, "a"), (18, "b"),
                     (44, "a"), (29, "a"), (52, "b"), (40, "b"), (61, "a"), (15, "a")]
    ]  # fmt: skip

    def run(split: int | None) -> list[WindowResult]:
        d = tmp_path / f"split-{split}"
        agg = runtime.open_task(d)
        out: list[WindowResult] = []
        for i, e in enumerate(events):
            if i == split:
                agg.close()  # snapshot ...
                agg = runtime.open_task(d)  # ... and restore in the middle
            agg.add_message(e)
            out += agg.get_result()
        agg.timeout(END_OF_TIME)
        out += agg.get_result()
        agg.close()
        return out

    reference = run(None)
    assert any(r.kind is Kind.LATE for r in reference)
    for split in range(1, len(events)):
        assert run(split) == reference, f"restore after {split} events"


def test_restore_keeps_pending_late_updates(tmp_path: Path) -> None:
    runtime = runtime_for(emit={"late": "10s"})
    agg = runtime.open_task(tmp_path)
    agg.add_message({"k": "a", "ts": 1 * S}, wall_ms=1 * S)
    agg.add_message({"k": "a", "ts": 30 * S}, wall_ms=2 * S)
    agg.add_message({"k": "a", "ts": 2 * S}, wall_ms=3 * S)  # late, waits for the period
    agg.timeout(3 * S)
    assert [r.kind for r in agg.get_result()] == [Kind.ON_TIME]
    agg.close()
    agg = runtime.open_task(tmp_path)
    agg.timeout(14 * S)
    (late,) = agg.get_result()
    assert (late.kind, late.update_seq, late.values["n"]) == (Kind.LATE, 1, 2)
    agg.close()


def test_one_by_one_and_batch_store_identical_frames(tmp_path: Path) -> None:
    """A single message is a batch of one: the stored frame records match byte for byte."""
    runtime = runtime_for(
        window={"type": "hopping", "size": "20s", "step": "5s"},
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "s", "op": "sum", "field": "v"},
            {"name": "lo", "op": "min", "field": "v"},
            {"name": "hi", "op": "max", "field": "v"},
            {"name": "first", "op": "first", "field": "v"},
        ],
        watermark={"allowed_lateness": "3s"},
    )
    events = [{"k": f"k{i % 3}", "ts": ((i * 37) % 50) * S, "v": i % 7} for i in range(60)]
    one = runtime.open_task(tmp_path / "one")
    for e in events:
        one.add_message(e)
    one.flush()
    batch = runtime.open_task(tmp_path / "batch")
    batch.add_batch(events)
    batch.flush()

    def frames(agg: WindowedAggregator) -> list[tuple[bytes, bytes]]:
        return [(k, v) for k, v in agg.store.scan(ColumnFamily.WINDOW_META, b"F", b"G")]

    assert frames(one) == frames(batch)
    assert len(frames(one)) > 0
    one.close()
    batch.close()


def test_early_results_survive_a_restart(tmp_path: Path) -> None:
    runtime = runtime_for(emit={"early": "2s", "late": "per_arrival"})
    agg = runtime.open_task(tmp_path)
    agg.add_message({"k": "a", "ts": 1 * S}, wall_ms=100 * S)
    agg.timeout(100 * S)  # starts the early clock
    agg.add_message({"k": "a", "ts": 2 * S}, wall_ms=101 * S)
    agg.close()  # the frame changed since the last EARLY results: that is persisted
    agg = runtime.open_task(tmp_path)
    agg.timeout(103 * S)
    (early,) = agg.get_result()
    assert (early.kind, early.update_seq, early.values["n"]) == (Kind.EARLY, 0, 2)
    agg.close()
    # sent: reopened (as a micro-batch task reopens its store), it is not sent again.
    # Before, the store kept the frame's EARLY mark, and every timer pass sent it anew
    for now in (106, 109):
        agg = runtime.open_task(tmp_path)
        agg.timeout(now * S)
        assert agg.get_result() == []
        agg.close()
