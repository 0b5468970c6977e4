"""An operator used wrongly from the library says so, and never loses input silently.

A library user's walkthrough found: input taken after ``close`` and reported applied,
then lost; a user operation raising part-way through ``add_batch`` left the operator
half-updated and it went on (a wrong result later); positions of the wrong type taken
and failing the next flush, a negative offset a silent replay; columns holding what no
decoder yields (a time beyond 2^61 ms, infinity) taken and poisoning the state.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import runtime_for
from joinkit import join_runtime

from window_operator.config import ConfigError, load_config, load_join_config
from window_operator.errors import (
    InvalidArgumentError,
    OperatorClosedError,
    OperatorFailedError,
)
from window_operator.events import EventBatch, RecordDecoder
from window_operator.join import JoinRows, build_join_runtime
from window_operator.kernel.shell import _not_called

S = 1_000
BASE = 1_700_000_000_000
WINDOWS: dict[str, dict[str, Any]] = {
    "tumbling": {"type": "tumbling", "size": "10s"},
    "session": {"type": "session", "gap": "10s"},
    "count": {"type": "count", "size": 3},
}
SUM = [{"name": "s", "op": "sum", "field": "v"}]


@pytest.mark.parametrize("shape", sorted(WINDOWS))
def test_an_operator_refuses_every_call_after_close(tmp_path: Path, shape: str) -> None:
    runtime = runtime_for(window=WINDOWS[shape], aggregations=SUM)
    op = runtime.open_task(tmp_path)
    op.add_message({"k": "a", "ts": BASE, "v": 1.0})
    op.close()
    calls = [
        lambda: op.add_message({"k": "a", "ts": BASE, "v": 2.0}),
        lambda: op.add_batch([{"k": "a", "ts": BASE, "v": 3.0}]),
        lambda: op.add_batch(EventBatch.from_columns(["a"], [BASE], numeric={"v": [4.0]})),
        lambda: op.timeout(2**62),
        lambda: op.get_windows("a", 0, 2**62),
        lambda: op.mark_consumed(0, 5),
        op.flush,
        op.begin_batch,
    ]
    for call in calls:
        with pytest.raises(OperatorClosedError, match="was closed"):
            call()
    op.close()  # a second close does nothing
    op = runtime.open_task(tmp_path)
    op.timeout(2**62)
    assert [r.values["s"] for r in op.get_result()] == [1.0]  # nothing taken after close
    op.close()


def test_a_join_refuses_every_call_after_close(tmp_path: Path) -> None:
    runtime = join_runtime({"rows": 1}, retention="1d")
    op = runtime.open_task(tmp_path)
    assert op.get_messages("L", 0, 0, 2**62, 0) == [] and op.get_windows(None, 0, 2**62) == []
    op.close()
    rows = JoinRows.from_columns([(1,)], [BASE], [b'{"k": 1}'], source=0)
    for call in (
        lambda: op.add_message("L", {"k": 1, "ts": BASE, "n": 0}),
        lambda: op.add_batch(rows),
        lambda: op.timeout(BASE),
        lambda: op.get_windows(None, 0, 2**62),
        lambda: op.get_messages("L", 0, 0, 2**62, 0),
    ):
        with pytest.raises(OperatorClosedError):
            call()


@pytest.mark.parametrize("shape", sorted(WINDOWS))
def test_a_user_operation_raising_part_way_fails_the_operator(tmp_path: Path, shape: str) -> None:
    """Before: the batch's first rows stayed applied, offsets were not, and the operator
    went on to send a window of what was half-applied."""
    runtime = runtime_for(
        window=WINDOWS[shape],
        aggregations=[
            {"name": "n", "op": "count"},
            {"name": "b", "op": "udf_example:FailsOnThirteenOp", "field": "v"},
        ],
    )
    op = runtime.open_task(tmp_path)
    op.add_message({"k": "a", "ts": BASE, "v": 1.0}, offset=0)
    op.flush()
    batch = [{"k": "a", "ts": BASE + S, "v": v} for v in (2.0, 13.0, 4.0)]
    with pytest.raises(ValueError, match="13 is not supported"):
        op.add_batch(batch)
    for call in (lambda: op.add_message({"k": "a", "ts": BASE, "v": 5.0}), op.flush):
        with pytest.raises(OperatorFailedError, match="add_batch raised ValueError"):
            call()
    op.close()  # closes the store as the last flush left it
    op = runtime.open_task(tmp_path)
    assert list(op.offsets.values()) == [0]
    op.timeout(2**62)
    assert [r.values for r in op.get_result()] == [{"n": 1, "b": 1.0}]
    op.close()


@pytest.mark.parametrize(
    ("partition", "offset", "wall_ms"),
    [("0", None, None), (1.5, None, None), (-1, None, None), (True, None, None),
     (0, -5, None), (0, "x", None), (0, 1.5, None), (0, None, "now")],
)  # fmt: skip
def test_positions_that_are_not_integers_are_refused_before_any_change(
    tmp_path: Path, partition: object, offset: object, wall_ms: object
) -> None:
    """Before: ``"0"`` and ``1.5`` were applied and failed the next flush (losing every
    record since the last), -1 was kept in the checkpoint, an offset of -5 made the
    record a replay without a word, and ``"x"`` raised a bare ``TypeError``."""
    runtime = runtime_for(aggregations=SUM)
    op = runtime.open_task(tmp_path)
    record = {"k": "a", "ts": BASE, "v": 1.0}
    with pytest.raises(InvalidArgumentError):
        op.add_message(record, partition=partition, offset=offset, wall_ms=wall_ms)  # type: ignore[arg-type]
    # usable; NumPy ints are taken as ints (the checkpoint's JSON takes no NumPy ones)
    assert op.add_message(record, partition=np.int64(0), offset=np.int64(0)).applied == 1
    op.mark_consumed(np.int64(0), np.int64(3))
    op.flush()
    op.close()
    assert runtime.open_task(tmp_path).offsets == {(0, 0): 3}


def test_other_bad_arguments_are_refused_before_any_change(tmp_path: Path) -> None:
    runtime = runtime_for(aggregations=SUM)
    op = runtime.open_task(tmp_path)
    for call, match in [
        (lambda: op.mark_consumed(0, None), "offset must be an integer"),  # type: ignore[arg-type]
        (lambda: op.mark_consumed(0, 5, source=3), "source must be 0, got 3"),
        (lambda: op.mark_consumed(0, 5, source="x"), "source must be 0"),  # type: ignore[arg-type]
        (lambda: op.timeout("soon"), "now_ms must be an integer"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            call()
    hand_made = EventBatch(
        ["a"], np.full(1, BASE), np.full(1, -3), np.full(1, -1), {"v": np.ones(1)}
    )
    with pytest.raises(InvalidArgumentError, match=r"partition\[0\] = -3"):
        op.add_batch(hand_made)
    op.timeout(BASE)
    op.flush()
    assert op.offsets == {}  # nothing moved
    op.close()


def test_join_positions_that_are_not_integers_are_refused(tmp_path: Path) -> None:
    op = join_runtime({"rows": 1}, retention="1d").open_task(tmp_path)
    bad = [{"k": 1, "ts": "x"}, {"k": 1, "ts": "y"}]  # rejected by the decoder
    with pytest.raises(InvalidArgumentError, match=r"partition\[1\] = -1"):
        op.add_records("L", bad, partitions=[0, -1], offsets=[7, 8])
    with pytest.raises(InvalidArgumentError, match="offsets has 1 rows"):
        op.add_records("L", bad, offsets=[5])
    with pytest.raises(InvalidArgumentError, match="source must be 0 to 1"):
        op.mark_consumed(0, 1, source=2)
    assert op.offsets == {} and op.get_errors() == []  # before any change
    with pytest.raises(InvalidArgumentError, match="offset must be"):
        op.add_message("L", {"k": 1, "ts": BASE, "n": 0}, offset=-5)
    with pytest.raises(InvalidArgumentError, match="partition must be"):
        op.mark_consumed("0", 1)
    assert op.add_message("L", {"k": 1, "ts": BASE, "n": 0}, offset=0).applied == 1
    op.close()


@pytest.mark.parametrize(
    ("ts", "numeric", "match"),
    [
        ([2**62], {"v": [1.0]}, r"ts\[0\] = 4611686018427387904 is out of range"),
        ([-(2**61)], {"v": [1.0]}, "out of range"),
        ([BASE], {"v": [math.inf]}, r"numeric\['v'\]\[0\] is inf"),
        ([BASE], {"v": [-math.inf]}, "is -inf"),
    ],
)
def test_columns_no_decoder_would_yield_are_refused(
    ts: list[int], numeric: dict[str, list[float]], match: str
) -> None:
    """Before: a time of 2^62 moved the watermark to where every later event was out of
    retention, for good; infinity gave a mean of inf and a NaN percentile."""
    with pytest.raises(InvalidArgumentError, match=match):
        EventBatch.from_columns(["a"], ts, numeric=numeric)
    with pytest.raises(InvalidArgumentError, match="offsets are >= 0"):
        EventBatch.from_columns(["a"], [BASE], numeric={"v": [1.0]}, offset=[-2])
    with pytest.raises(InvalidArgumentError, match="out of range"):
        JoinRows.from_columns([(1,)], [2**62], [b"{}"], source=0)


def test_column_times_that_are_not_whole_ms_are_floored_as_the_decoders_floor_them() -> None:
    """A JSON time field of -1.5 ms is -2 ms (floored). Before, ``from_columns`` took it
    as -1 (truncated toward zero), ``NaN`` as -2^63 ("out of range"), and a list of
    numeric strings or of bools as the numbers they spell."""
    decoder = RecordDecoder(key_field="page", timestamp_field="ts")
    assert decoder.time_of({"page": "a", "ts": -1.5}) == -2
    got = EventBatch.from_columns(["a", "a", "a"], [-1.5, 2.5, 7.0]).ts.tolist()
    assert got == [-2, 2, 7]
    assert JoinRows.from_columns([(1,)], np.array([9.99]), [b"{}"], source=0).ts.tolist() == [9]
    for ts, match in [
        ([math.nan], r"ts\[0\] = nan is not an event time"),
        ([1.0, -math.inf], r"ts\[1\] = -inf is not an event time"),
        ([2.0**62], "is not an event time"),
        (["5"], "ts must hold integers of 64 bits"),
        ([True], "ts must hold integers of 64 bits"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            EventBatch.from_columns(["a"] * len(ts), ts)
        with pytest.raises(InvalidArgumentError, match=match):
            JoinRows.from_columns([(1,)] * len(ts), ts, [b"{}"] * len(ts), source=0)


@pytest.mark.parametrize("shape", sorted(WINDOWS))
def test_query_bounds_are_whole_numbers_in_every_operator(tmp_path: Path, shape: str) -> None:
    """A float of a whole number is taken and an infinity is unbounded; ``0.5``,
    ``None``, text and bools are refused by name. Before, a float bound raised a
    ``KeyEncodingError`` from the store in time windows and sessions and was taken in
    count windows; ``None`` raised a bare ``TypeError``."""
    runtime = runtime_for(window=WINDOWS[shape], aggregations=SUM)
    op = runtime.open_task(tmp_path)
    op.add_message({"k": "a", "ts": BASE, "v": 1.0}, partition=0, offset=0)
    whole = op.get_windows("a", 0, 2 * BASE)
    assert len(whole) == 1
    assert op.get_windows("a", 0.0, float(2 * BASE)) == whole
    assert op.get_windows("a", np.int64(0), np.float64(2 * BASE)) == whole
    assert op.get_windows("a", -math.inf, math.inf) == whole
    for bad, shown in [(0.5, "float 0.5"), (None, "null"), ("0", 'string "0"'), (True, "true")]:
        with pytest.raises(InvalidArgumentError, match=f"start = .*{shown}.*whole numbers"):
            op.get_windows("a", bad, 2 * BASE)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="end = float NaN"):
        op.get_windows("a", 0, math.nan)  # type: ignore[arg-type]
    assert op.get_windows("a", 0, 2 * BASE) == whole  # still usable
    op.close()


def test_join_query_bounds_are_whole_numbers(tmp_path: Path) -> None:
    runtime = join_runtime({"rows": 1}, retention="1d")
    op = runtime.open_task(tmp_path)
    op.add_message("L", {"k": 1, "ts": BASE, "n": 0})
    assert len(op.get_messages("L", 0.0, 0, math.inf, 0)) == 1
    assert len(op.get_windows(None, 0.0, math.inf)) == 1
    with pytest.raises(InvalidArgumentError, match="end_offset = float 0.5"):
        op.get_messages("L", 0, 0, 2 * BASE, 0.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="start = null"):
        op.get_windows(None, None, 2 * BASE)  # type: ignore[arg-type]
    op.close()


def test_a_batch_missing_a_column_or_of_uneven_columns_is_refused(tmp_path: Path) -> None:
    """Before: a bare ``KeyError: 'v'`` from deep inside, and an ``IndexError`` for a
    batch built directly with a short column."""
    runtime = runtime_for(aggregations=[*SUM, {"name": "m", "op": "max", "field": "w"}])
    op = runtime.open_task(tmp_path)
    with pytest.raises(
        InvalidArgumentError, match="no column 'w' in numeric, which aggregation 'm'"
    ):
        op.add_batch(EventBatch.from_columns(["a"], [BASE], numeric={"v": [1.0]}))
    short = np.zeros(1, dtype=np.int64)
    uneven = EventBatch(
        ["a", "b"], np.full(2, BASE), short, short, {"v": np.ones(2), "w": np.ones(2)}
    )
    with pytest.raises(InvalidArgumentError, match="column partition has 1 rows, keys have 2"):
        op.add_batch(uneven)
    full = EventBatch.from_columns(["a"], [BASE], numeric={"v": [1.0], "w": [2.0]})
    assert op.add_batch(full).applied == 1  # still usable
    op.close()


@pytest.mark.parametrize("shape", sorted(WINDOWS))
def test_a_query_by_a_key_that_is_not_text_is_refused(tmp_path: Path, shape: str) -> None:
    op = runtime_for(window=WINDOWS[shape], aggregations=SUM).open_task(tmp_path)
    op.add_message({"k": 1, "ts": BASE, "v": 1.0})
    with pytest.raises(InvalidArgumentError, match=r"key must be text.*got int"):
        op.get_windows(1, 0, 2**62)  # type: ignore[arg-type]
    assert [w.key for w in op.get_windows("1", 0, 2**62)] == ["1"]
    op.close()


def test_join_configs_load_typed_and_the_wrong_kind_is_named() -> None:
    root = Path(__file__).resolve().parents[3]
    config = load_join_config(root / "config" / "orders-shipments.yaml")
    assert build_join_runtime(config).config is config
    with pytest.raises(ConfigError, match="join"):
        load_join_config(root / "config" / "clicks.yaml")
    with pytest.raises(TypeError, match="takes a join job's JoinJobConfig"):
        build_join_runtime(load_config(root / "config" / "clicks.yaml"))  # type: ignore[arg-type]


def test_a_task_number_below_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="task must be an integer >= 0"):
        runtime_for().open_task(tmp_path, -1)
    assert not any(tmp_path.rglob("task--1"))


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ([None], r"keys\[0\] = null: keys are text"),
        (["a", b"b"], r"keys\[1\] = bytes .*: keys are text"),
        ([7], r"keys\[0\] = int 7"),
        (["a", "\ud800"], r"keys\[1\] is not valid Unicode"),
        (["x" * 5000], r"keys\[0\] is 5000 bytes; the limit is 4096"),
    ],
)
def test_keys_no_decoder_would_yield_are_refused(
    tmp_path: Path, keys: list[Any], match: str
) -> None:
    """Before: ``None``, bytes or a number failed the operator with a ``KeyEncodingError``
    (where ``key_from: kafka`` users give their Kafka keys), and a 5000-byte key was
    taken (a decoder rejects it as ``BAD_KEY``)."""
    with pytest.raises(InvalidArgumentError, match=match):
        EventBatch.from_columns(keys, [BASE] * len(keys), numeric={"v": [1.0] * len(keys)})
    assert len(EventBatch.from_columns(["é" * 1024], [BASE])) == 1  # 2048 bytes: taken


def test_join_columns_that_are_not_64_bit_integers_are_refused(tmp_path: Path) -> None:
    """Before: a ``None`` or a ``2**63`` arrival time raised a bare ``TypeError`` or
    ``OverflowError`` and failed the operator, a short column an ``IndexError``, and
    ``1.5`` was taken as 1."""
    op = join_runtime({"rows": 1}, retention="1d").open_task(tmp_path)
    record = {"k": 1, "ts": BASE, "n": 0}
    for wall, match in [
        ([None], "wall_ms must hold integers of 64 bits, got object"),
        ([2**63], "wall_ms must hold integers of 64 bits, got uint64"),
        ([1.5], "wall_ms must hold integers of 64 bits, got float64"),
        ([1, 2], "column wall_ms has 2 rows, keys have 1"),
    ]:
        with pytest.raises(InvalidArgumentError, match=match):
            op.add_records("L", [record], wall_ms=wall)
    with pytest.raises(InvalidArgumentError, match="offsets must hold integers"):
        op.add_records("L", [record], offsets=[0.5])
    # an argument the method does not take is a TypeError, and nothing ran
    with pytest.raises(TypeError, match="kafka_key"):
        op.add_message("L", record, kafka_key="x")  # type: ignore[call-arg]
    assert op.add_records("L", [record], wall_ms=[BASE]).applied == 1  # still usable
    op.close()


def test_only_the_type_error_of_a_call_that_does_not_bind_is_not_a_failure() -> None:
    """A ``TypeError`` raised inside a method (a user operation, say) may come after a
    change: it fails the operator; one of arguments that do not bind comes before."""

    def method() -> None:
        raise TypeError("inside")

    def verdict(*args: Any) -> bool:
        try:
            method(*args)
        except TypeError as exc:
            return _not_called(exc)
        raise AssertionError("no TypeError")

    assert verdict() is False
    assert verdict(1) is True


@pytest.mark.parametrize(
    ("partition", "offset", "wall_ms"),
    [(2**31, None, None), (0, 2**63 - 1, None), (0, 2**64 + 5, None), (0, None, 2**64),
     (0, None, -(2**64))],
)  # fmt: skip
def test_positions_beyond_kafka_ranges_are_refused_before_any_change(
    tmp_path: Path, partition: int, offset: int | None, wall_ms: int | None
) -> None:
    """Before: taken and reported applied; then the next flush raised ``TypeError:
    Integer exceeds 64-bit range`` (or an ``add_batch`` an ``OverflowError``), which
    failed the operator and lost every record since the last commit."""
    runtime = runtime_for(aggregations=SUM)
    op = runtime.open_task(tmp_path)
    record = {"k": "a", "ts": BASE, "v": 1.0}
    with pytest.raises(InvalidArgumentError, match="at most|within"):
        op.add_message(record, partition=partition, offset=offset, wall_ms=wall_ms)
    # the operator stays usable, and the largest Kafka positions are taken
    assert op.add_message(record, partition=2**31 - 1, offset=2**63 - 2).applied == 1
    op.timeout(-(2**64))  # a clock before the start of time: no timer to run
    op.flush()
    op.close()
    assert runtime.open_task(tmp_path).offsets == {(0, 2**31 - 1): 2**63 - 2}


def test_numpy_scalars_in_records_are_taken_as_their_values(tmp_path: Path) -> None:
    """Rows of a NumPy array hold NumPy scalars (``np.float64`` is even a ``float``).
    Before: every such record was rejected (``WRONG_TYPE: field 'v' must be a number,
    got float64 2.0``, ``BAD_TIMESTAMP`` for an ``np.int64`` time, ``BAD_KEY`` for an
    ``np.int64`` key), by ``add_message`` and ``add_batch`` alike."""
    aggs = [*SUM, {"name": "f", "op": "first", "field": "w"}]
    runtime = runtime_for(aggregations=aggs)
    op = runtime.open_task(tmp_path)
    ts = np.array([BASE, BASE + 1], dtype=np.int64)
    v = np.array([1.5, 2.5])
    records = [{"k": np.int64(7), "ts": ts[i], "v": v[i], "w": np.int32(i)} for i in range(2)]
    assert op.add_message(records[0]).applied == 1
    assert op.add_batch([records[1]]).applied == 1
    nan = {"k": "7", "ts": BASE, "v": np.float64("nan"), "w": 0}
    assert op.add_message(nan).rejected == 1  # a NaN is NaN, whatever holds it
    assert [e.code.value for e in op.get_errors()] == ["NON_FINITE_VALUE"]
    op.timeout(2**62)
    (result,) = op.get_result()
    assert (result.key, result.values) == ("7", {"s": 4.0, "f": 0})
    assert type(result.values["f"]) is int
    op.close()


@pytest.mark.parametrize(
    ("on", "key"),
    [(["k"], (1,)), (["k"], True), (["k"], 1.0), (["k"], None), (["k"], [1]), (["k"], 2**70),
     (["k", "k2"], 1), (["k", "k2"], (1,)), (["k", "k2"], (1, None)), ([], 1)],
)  # fmt: skip
def test_join_rows_with_keys_no_decoder_yields_are_refused_before_any_change(
    tmp_path: Path, on: list[str], key: object
) -> None:
    """``JoinRows.from_columns``' keys are the ``on`` value (one field), the tuple of
    them (several), or ``()`` (none). Before: ``(1,)`` for one field was taken and never
    joined, ``True`` and ``1.0`` joined ``1``, and ``None``, a list or an integer beyond
    64 bits failed the operator (``TypeError`` / ``KeyEncodingError``)."""
    op = join_runtime({"on": on, "range": "1m"}).open_task(tmp_path)
    good = {0: (), 1: 1, 2: (1, "x")}[len(on)]
    left = JoinRows.from_columns([good], [BASE], ['{"k": 1, "k2": "x"}'], source=0)
    assert op.add_batch(left).applied == 1
    rows = JoinRows.from_columns([key], [BASE], ['{"k": 1, "k2": "x"}'], source=1)  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match=r"keys\[0\]"):
        op.add_batch(rows)
    right = JoinRows.from_columns([good], [BASE], ['{"k": 1, "k2": "x"}'], source=1)
    assert op.add_batch(right).matches == 1  # still usable, and the right key joins
    op.close()


@pytest.mark.parametrize("shape", [*sorted(WINDOWS), "offsets"])
def test_add_message_with_its_arrival_time_guards_against_far_future_events(
    tmp_path: Path, shape: str
) -> None:
    """README: an event dated more than ``watermark.max_future`` after its arrival is
    ``FUTURE_TIMESTAMP`` and never reaches the operator. Before, the library's
    ``add_message(..., wall_ms=)`` took a year-3000 event; its watermark then rejected
    every later event as ``OUT_OF_RETENTION``, in the committed state too."""
    window = WINDOWS.get(shape, {"type": "offsets", "size": 3})
    runtime = runtime_for(window=window, aggregations=SUM)
    op = runtime.open_task(tmp_path)
    year_3000 = 32_503_680_000_000
    assert op.add_message({"k": "a", "ts": BASE, "v": 1.0}, wall_ms=BASE).applied == 1
    assert op.add_message({"k": "a", "ts": year_3000, "v": 9.0}, wall_ms=BASE + 1).rejected == 1
    (error,) = op.get_errors()
    assert (error.code.value, error.offset) == ("FUTURE_TIMESTAMP", 1)
    assert "watermark.max_future" in error.reason
    # a day ahead is within the default limit, and an event without its arrival time
    # is not checked (as a Kafka record without a timestamp)
    assert op.add_message({"k": "a", "ts": BASE + 2, "v": 1.0}, wall_ms=BASE + 2).applied == 1
    assert op.get_errors() == []
    op.close()


def test_a_join_message_with_its_arrival_time_is_guarded_too(tmp_path: Path) -> None:
    op = join_runtime({"range": "1m"}).open_task(tmp_path)
    assert op.add_message("L", {"k": 1, "ts": 32_503_680_000_000}, wall_ms=BASE).rejected == 1
    assert [e.code.value for e in op.get_errors()] == ["FUTURE_TIMESTAMP"]
    assert op.add_message("L", {"k": 1, "ts": BASE}, wall_ms=BASE).applied == 1
    op.close()


@pytest.mark.parametrize("column", ["arrow", "numpy_int", "numpy_float"])
def test_object_columns_of_arrow_or_numpy_arrays_hold_python_values(
    tmp_path: Path, column: str
) -> None:
    """README: ``add_batch`` takes "an EventBatch of NumPy/Arrow columns". Before, an
    ``objects`` column kept Arrow / NumPy scalars: results held ``pyarrow.DoubleScalar``
    (a null as ``DoubleScalar(None)``) or ``np.float64``, and the next flush failed
    (``TypeError: Object of type DoubleScalar is not JSON serializable``, ``int64``
    alike), failing the operator."""
    import pyarrow as pa

    aggs = [*SUM, {"name": "c", "op": "collect", "field": "v"}]
    op = runtime_for(aggregations=aggs).open_task(tmp_path)
    objects: Any = {
        "arrow": pa.array([1.0, None]),
        "numpy_int": np.array([1, 2]),
        "numpy_float": np.array([1.0, 2.0]),
    }[column]
    expected = {"arrow": [1.0, None], "numpy_int": [1, 2], "numpy_float": [1.0, 2.0]}[column]
    batch = EventBatch.from_columns(
        ["a", "a"], [BASE, BASE + 1], numeric={"v": [1.0, 2.0]}, objects={"v": objects}
    )
    assert op.add_batch(batch).applied == 2
    op.flush()  # before: TypeError, and the operator failed
    op.timeout(2**62)
    (result,) = op.get_result()
    assert result.values["c"] == expected
    assert [type(v) for v in result.values["c"]] == [type(v) for v in expected]
    op.close()
