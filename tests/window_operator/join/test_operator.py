"""The join operator on real RocksDB: the seed's Orders/Shipments examples, replays,
restore, the watermark over both inputs, idle inputs, retention, bad records and the
typed protocol (source indexes, offsets, the adopted clock)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
from joinkit import ROOT, S, hms, join_runtime, orders_runtime

from stores.rocks import ColumnFamily
from window_operator.errors import IncompatibleStateError
from window_operator.join import (
    LEFT,
    RIGHT,
    JoinKind,
    JoinOperator,
    JoinResult,
    JoinRows,
    UnknownSourceError,
)
from window_operator.kernel import ClockState, InputPosition, StepStats
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode

# ---------------------------------------------------------------------------------------
# The seed's Orders / Shipments example
# ---------------------------------------------------------------------------------------

# Orders (left) and Shipments (right), in wall-clock arrival order. Orders are taken
# first at equal wall clocks ("the join operator always takes Orders output first").
#
#   wall     input      offset  id  value/cost  time
#   9:00:00  Orders     1       1   value 0     8:59:10
#   9:00:00  Shipments  1000    3   cost 0      9:00:10
#   9:00:10  Shipments  1001    1   cost 2      9:00:10
#   9:00:59  Orders     2       3   value 5     9:00:00
#   9:01:01  Shipments  1002    1   cost 3      9:01:10
#   9:01:01  Shipments  1003    9   cost 1      9:01:20
#   9:02:01  Orders     3       9   value 9     8:59:30   <- late, still joins
SAMPLE = ROOT / "config" / "samples" / "orders-shipments.jsonl"
#: The rows (id, value, cost) the seed expects, by the wall clock they are known at.
EXPECTED_BY = [
    ("9:00:59", {(3, 5, 0), (1, 0, 2)}),
    ("9:01:59", {(1, 0, 3)}),
    ("9:02:59", {(9, 9, 1)}),
]


def sample_lines() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in SAMPLE.read_bytes().splitlines()]


def seed_rows(results: Sequence[JoinResult]) -> Counter[tuple[int, int, int]]:
    assert all(r.kind is JoinKind.MATCH for r in results)
    out: Counter[tuple[int, int, int]] = Counter()
    for r in results:
        assert r.left is not None and r.right is not None
        out[(r.key["id"], r.left["value"], r.right["cost"])] += 1
    return out


def run_seed_example(op: JoinOperator, one_by_one: bool) -> None:
    """Feed the sample by wall clock; check each result row appears when the seed says."""
    lines = sample_lines()
    got: Counter[tuple[int, int, int]] = Counter()
    pending = list(lines)
    for deadline, rows in EXPECTED_BY:
        arrived = [x for x in pending if x["wall_ms"] <= hms(deadline)]
        pending = pending[len(arrived) :]
        # consecutive lines of one input form a batch
        runs: list[list[dict[str, Any]]] = []
        for x in arrived:
            if runs and runs[-1][0]["source"] == x["source"]:
                runs[-1].append(x)
            else:
                runs.append([x])
        for run in runs:
            recs = [{k: v for k, v in x.items() if k not in ("source", "offset")} for x in run]
            if one_by_one:
                for x, rec in zip(run, recs, strict=True):
                    wall = rec.pop("wall_ms")
                    op.add_message(x["source"], rec, offset=x["offset"], wall_ms=wall)
            else:
                walls = [rec.pop("wall_ms") for rec in recs]
                op.add_records(
                    run[0]["source"], recs, offsets=[x["offset"] for x in run], wall_ms=walls
                )
        new = seed_rows(op.get_result())
        assert new == Counter(rows), deadline
        got += new
    op.timeout(END_OF_TIME)
    assert op.get_result() == [] and op.get_errors() == []
    assert got == Counter({(3, 5, 0): 1, (1, 0, 2): 1, (1, 0, 3): 1, (9, 9, 1): 1})


@pytest.mark.parametrize("one_by_one", [False, True])
@pytest.mark.parametrize("store", ["auto", "ts_offset", "ts_fields_offset", "fields_ts_offset"])
def test_orders_shipments_time_range_example(
    open_join: Callable[..., JoinOperator], store: str, one_by_one: bool
) -> None:
    # RANGE '2' min PRECEDING: 0 <= shipment.time - order.time <= 2 min. Order 1 (8:59:10)
    # pairs with shipment 1002 (9:01:10) at exactly 2 minutes: the bound is inclusive.
    runtime = orders_runtime(range="2m", store=store)
    # cache_max_rows=0 sends every lookup after a flush to RocksDB through the layout
    op = open_join(runtime, cache_max_rows=0)
    run_seed_example(op, one_by_one)
    # offsets are keyed by (source index, partition): orders are 0, shipments 1
    assert op.offsets == {(0, 0): 3, (1, 0): 1003}


@pytest.mark.parametrize("one_by_one", [False, True])
def test_orders_shipments_rows_example(
    open_join: Callable[..., JoinOperator], one_by_one: bool
) -> None:
    # ROWS 3 PRECEDING over Orders: a shipment joins the 3 latest orders of its id that
    # arrived before it; an order arriving later joins the stored shipments of its id
    # (Shipments' default window is unbounded), so late order 3 still pairs with 1003.
    op = open_join(orders_runtime(rows=3))
    run_seed_example(op, one_by_one)


# ---------------------------------------------------------------------------------------
# Replays and restore
# ---------------------------------------------------------------------------------------


def test_replays_change_nothing(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": 10 * S, "kind": "full"}))
    lefts = [{"k": 1, "ts": t * S, "n": t} for t in range(5)]
    rights = [{"k": 1, "ts": t * S + 500, "n": 10 + t} for t in range(5)]
    op.add_records("L", lefts, offsets=list(range(5)))
    op.add_records("R", rights, offsets=list(range(5)))
    first = op.get_result()
    op.flush()
    stats = op.add_records("L", lefts, offsets=list(range(5)))
    assert (stats.applied, stats.replayed) == (0, 5)
    stats = op.add_records("R", rights[:3], offsets=list(range(3)))
    assert stats.replayed == 3
    op.add_message("L", {"k": 1, "ts": 0, "n": 99}, offset=2)  # an old offset: a replay
    assert op.get_result() == [] and op.get_errors() == []
    assert len(first) == 15  # each left row pairs with the rights 0-10 s after it


def test_restore_keeps_outer_state_and_offsets(
    open_join: Callable[..., JoinOperator],
) -> None:
    runtime = join_runtime({"range": 10 * S, "kind": "left"})
    op = open_join(runtime, "s")
    op.add_records("L", [{"k": 1, "ts": 0, "n": 0}, {"k": 2, "ts": 0, "n": 1}])
    op.add_records("R", [{"k": 3, "ts": 60 * S, "n": 2}])
    assert op.get_result() == []  # the left input holds the watermark at 0
    op.add_records("L", [{"k": 4, "ts": 60 * S, "n": 5}])
    # the watermark (60 s) is past both left rows' last chance (10 s): emitted unmatched
    assert [(r.kind, r.left and r.left["n"]) for r in op.get_result()] == [
        (JoinKind.LEFT_UNMATCHED, 0),
        (JoinKind.LEFT_UNMATCHED, 1),
    ]
    op.close()
    op = open_join(runtime, "s")
    assert op.watermark == 60 * S and op.offsets == {(LEFT, 0): 2, (RIGHT, 0): 0}
    op.add_message("R", {"k": 1, "ts": 5 * S, "n": 3})  # late, matches row 0
    assert [
        (r.kind, r.left and r.left["n"], r.right and r.right["n"]) for r in op.get_result()
    ] == [
        (JoinKind.RETRACT, 0, None),
        (JoinKind.MATCH, 0, 3),
    ]
    op.add_message("R", {"k": 1, "ts": 6 * S, "n": 4})  # a second match: no second retract
    assert [r.kind for r in op.get_result()] == [JoinKind.MATCH]


def test_a_store_of_another_join_shape_is_refused(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"range": 10 * S}), "s")
    op.add_message("L", {"k": 1, "ts": 0, "n": 0})
    op.close()
    # an outer join would never emit the stored rows of an inner one unmatched
    with pytest.raises(IncompatibleStateError, match="join"):
        open_join(join_runtime({"range": 10 * S, "kind": "left"}), "s")


# ---------------------------------------------------------------------------------------
# Watermark, idle inputs, retention, errors
# ---------------------------------------------------------------------------------------


def test_watermark_is_the_min_over_inputs_and_partitions(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"range": S}, lateness="1s"))
    op.add_message("L", {"k": 1, "ts": 100 * S, "n": 0})
    assert op.watermark == NO_WATERMARK  # the right input has not spoken yet
    op.add_message("R", {"k": 1, "ts": 50 * S, "n": 1})
    assert op.watermark == 49 * S
    op.add_message("R", {"k": 1, "ts": 70 * S, "n": 2}, partition=1)
    op.add_message("R", {"k": 1, "ts": 90 * S, "n": 3}, partition=0)
    assert op.watermark == 69 * S  # partition 1 of R is the slowest
    op.add_message("R", {"k": 1, "ts": 10 * S, "n": 4}, partition=1)
    assert op.watermark == 69 * S  # never decreases


@pytest.mark.parametrize("idle", [None, "5s"])
def test_idle_input_stops_holding_the_watermark(
    open_join: Callable[..., JoinOperator], idle: str | None
) -> None:
    # Left join; the right input is silent. With an idle timeout the left rows are
    # emitted unmatched once the wall clock shows R idle; a late right row then
    # matches one of them: MATCH plus RETRACT.
    op = open_join(join_runtime({"range": 10 * S, "kind": "left"}, idle=idle))
    op.add_message("L", {"k": 1, "ts": 1 * S, "n": 0}, wall_ms=1 * S)
    op.timeout(4 * S)
    assert op.get_result() == []
    op.add_message("L", {"k": 2, "ts": 30 * S, "n": 1}, wall_ms=30 * S)
    op.timeout(31 * S)
    got = [(r.kind, r.left and r.left["n"]) for r in op.get_result()]
    if idle is None:
        assert got == [] and op.watermark == NO_WATERMARK
        return
    assert got == [(JoinKind.LEFT_UNMATCHED, 0)] and op.watermark == 30 * S
    op.add_message("R", {"k": 1, "ts": 5 * S, "n": 2}, wall_ms=32 * S)
    got = [(r.kind, r.left and r.left["n"], r.right and r.right["n"]) for r in op.get_result()]
    assert got == [(JoinKind.RETRACT, 0, None), (JoinKind.MATCH, 0, 2)]


def test_idle_partition_releases_its_input(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": S}, idle="5s"))
    op.add_message("L", {"k": 1, "ts": 10 * S, "n": 0}, partition=0, wall_ms=10 * S)
    op.add_message("L", {"k": 1, "ts": 10 * S, "n": 1}, partition=1, wall_ms=10 * S)
    op.add_message("R", {"k": 1, "ts": 50 * S, "n": 2}, wall_ms=11 * S)
    assert op.watermark == 10 * S
    op.add_message("L", {"k": 1, "ts": 40 * S, "n": 3}, partition=0, wall_ms=12 * S)
    assert op.watermark == 10 * S  # L partition 1 is behind and not idle yet
    op.timeout(16 * S)
    assert op.watermark == 40 * S  # L partition 1 idle for 6 s


def test_retention_rejects_and_expires(open_join: Callable[..., JoinOperator]) -> None:
    runtime = join_runtime({"range": 10 * S}, retention="1m")
    op = open_join(runtime, cache_max_rows=0)
    op.add_records("L", [{"k": 1, "ts": 0, "n": 0}, {"k": 1, "ts": 100 * S, "n": 1}])
    op.add_records("R", [{"k": 9, "ts": 100 * S, "n": 2}])
    op.flush()
    # left row 0 can match rights up to 10 s; rights are accepted down to 100 s - 60 s
    assert [m.record["n"] for m in op.get_messages("L", -(2**62), 0, 2**62, 2**62)] == [1]
    stored = list(op.store.scan(ColumnFamily.MESSAGES, b"L", b"M"))
    assert len(stored) == 1
    stats = op.add_message("R", {"k": 1, "ts": 30 * S, "n": 3}, offset=7)
    assert stats.rejected == 1 and op.get_result() == []
    (err,) = op.get_errors()
    assert err.code is ErrorCode.OUT_OF_RETENTION and (err.partition, err.offset) == (0, 7)
    assert err.topic == "R" and orjson.loads(err.raw or b"")["n"] == 3
    op.add_message("R", {"k": 1, "ts": 40 * S, "n": 4})  # accepted; row 0 is gone
    assert op.get_result() == []


def test_bad_records_become_errors_once(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": S, "on": ["k", "k2"]}))
    recs = [
        {"k": 1, "ts": 0},  # k2 missing
        {"k": None, "k2": "x", "ts": 0},
        {"k": 1.5, "k2": "x", "ts": 0},
        {"k": True, "k2": "x", "ts": 0},
        {"k": 1, "k2": "x"},
        {"k": 1, "k2": "x", "ts": 0, "n": 1},  # good
    ]
    stats = op.add_records("L", recs, offsets=list(range(6)))
    assert (stats.applied, stats.rejected) == (1, 5)
    errors = op.get_errors()
    assert [e.code for e in errors] == [
        ErrorCode.MISSING_FIELD,
        ErrorCode.MISSING_FIELD,
        ErrorCode.WRONG_TYPE,
        ErrorCode.WRONG_TYPE,
        ErrorCode.MISSING_TIMESTAMP,
    ]
    assert [e.offset for e in errors] == [0, 1, 2, 3, 4]
    op.add_records("L", recs, offsets=list(range(6)))  # a replay reports nothing again
    assert op.get_errors() == []
    with pytest.raises(UnknownSourceError, match="'X'"):
        op.add_message("X", {"k": 1})


def test_a_bad_single_record_is_rejected_once(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": S}))
    assert op.add_message("R", {"k": 1}, offset=3) == StepStats(rejected=1)
    (err,) = op.get_errors()
    assert (err.code, err.partition, err.offset, err.topic) == (
        ErrorCode.MISSING_TIMESTAMP,
        0,
        3,
        "R",
    )
    assert op.add_message("R", {"k": 1}, offset=3) == StepStats(replayed=1)
    assert op.get_errors() == [] and op.offsets == {InputPosition(RIGHT, 0): 3}


# ---------------------------------------------------------------------------------------
# The typed protocol
# ---------------------------------------------------------------------------------------


def test_decoded_rows_name_their_source(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": 5 * S}))
    left = JoinRows.from_columns([1, 2], [0, S], [b'{"n":0}', b'{"n":1}'], source=LEFT)
    right = JoinRows.from_columns([2], [3 * S], [b'{"n":2}'], source=RIGHT, offset=[40])
    assert op.add_batch(left) == StepStats(applied=2)
    assert op.add_batch(right) == StepStats(applied=1, matches=1)
    ((match,),) = [b.to_results() for b in op.take_result_batches()]
    assert (match.key, match.left, match.right) == ({"k": 2}, {"n": 1}, {"n": 2})
    assert op.offsets == {(LEFT, 0): 1, (RIGHT, 0): 40}
    with pytest.raises(UnknownSourceError):
        op.add_batch(JoinRows.from_columns([1], [0], [b"{}"], source=2))


def test_mark_consumed_moves_the_replay_boundary_of_one_input(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"range": S}))
    op.mark_consumed(0, 4, source=RIGHT)
    assert op.add_message("R", {"k": 1, "ts": 0}, offset=4) == StepStats(replayed=1)
    assert op.add_message("L", {"k": 1, "ts": 0}, offset=4) == StepStats(applied=1)
    assert op.offsets == {(LEFT, 0): 4, (RIGHT, 0): 4}


def test_an_adopted_clock_replaces_the_inputs_own(
    open_join: Callable[..., JoinOperator],
) -> None:
    # Left join: the job's clock (both inputs at 60 s) proves row 0 unmatched although
    # this task has seen nothing of the right input; its own records then no longer
    # move the clock.
    op = open_join(join_runtime({"range": 10 * S, "kind": "left"}))
    op.add_message("L", {"k": 1, "ts": 0, "n": 0})
    assert op.watermark == NO_WATERMARK
    clock = {InputPosition(LEFT, 0): 60 * S, InputPosition(RIGHT, 3): 60 * S}
    op.adopt_clock(ClockState(max_ts=clock, watermark=60 * S))
    assert op.watermark == 60 * S
    assert [(r.kind, r.left and r.left["n"]) for r in op.get_result()] == [
        (JoinKind.LEFT_UNMATCHED, 0)
    ]
    op.add_message("L", {"k": 2, "ts": 500 * S, "n": 1})
    op.add_message("R", {"k": 2, "ts": 500 * S, "n": 2})
    assert op.watermark == 60 * S
    assert [r.kind for r in op.get_result()] == [JoinKind.MATCH]


def test_join_output_record_shape(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": S, "kind": "left"}))
    op.add_message("L", {"k": "a", "ts": 0, "n": 0})
    op.add_message("R", {"k": "b", "ts": 10 * S, "n": 1})
    op.timeout(END_OF_TIME)
    (batch,) = op.take_result_batches()
    assert batch.to_json_lines() == (
        b'{"kind":"LEFT_UNMATCHED","key":{"k":"a"},"left":{"k":"a","ts":0,"n":0},'
        b'"right":null,"left_ts":0,"right_ts":null}\n'
    )
    assert batch.to_results()[0].to_dict()["right"] is None


def test_an_adopted_watermark_counts_even_without_partition_times(
    open_join: Callable[..., JoinOperator],
) -> None:
    # the driver's logged watermark alone (e.g. a replayed batch) decides as it did
    op = open_join(join_runtime({"range": 10 * S, "kind": "left"}))
    op.add_message("L", {"k": 1, "ts": 0, "n": 0})
    op.adopt_clock(ClockState(watermark=60 * S))
    assert op.watermark == 60 * S
    assert [r.kind for r in op.get_result()] == [JoinKind.LEFT_UNMATCHED]


@pytest.mark.parametrize("store", ["ts_offset", "fields_ts_offset", "ts_fields_offset"])
def test_live_state_counts_the_messages_each_input_holds(
    open_join: Callable[..., JoinOperator], store: str
) -> None:
    """What the state gauge reports for a join: per input, the messages not yet expired,
    counted by window frame (the frame the expiry cut-off falls in counts whole, so at
    most that frame's messages over); keys and windows are not told. Checked against
    the input after every flush, and after a restore."""
    rng = random.Random(7)
    runtime = join_runtime({"between": ["-2s", "3s"], "store": store}, retention="4s")
    frame = runtime.spec.frame_ms
    op = open_join(runtime)
    staged: dict[str, list[int]] = {"L": [], "R": []}
    for step in range(30):
        t = step * 700
        for name in ("L", "R"):
            ts = [t + rng.randrange(-1_500, 1_500) for _ in range(rng.randrange(0, 6))]
            op.add_records(name, [{"k": rng.choice("abc"), "ts": x, "n": 0} for x in ts])
            staged[name] += ts
        assert op.get_errors() == []  # nothing out of retention: every message is held
        op.flush()
        if step == 20:  # restore in the middle
            op.close()
            op = open_join(runtime)
        live = op.live_state()
        assert (live.keys, live.windows) == (-1, -1)
        for side, name in enumerate(("L", "R")):
            cut = op.storage.expired[side]
            held = [x for x in staged[name] if x >= cut]
            at_cut = [x for x in staged[name] if cut - cut % frame <= x < cut]
            assert len(held) <= live.messages[name] <= len(held) + len(at_cut), (step, name)
    assert op.storage.expired[LEFT] > 0  # messages did expire
