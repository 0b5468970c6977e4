"""A task never stops on a record: failing records are isolated and reported with their
source position, far-future events are rejected by their Kafka timestamp."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers import runtime_for
from jobkit import create_topic, produce, read_topic

from stores.rocks import TaskStore
from window_operator.codecs import JsonPayloadDecoder, result_key
from window_operator.codecs.inputs import InputDecoder
from window_operator.errors import UserCodeExitError
from window_operator.events import EventBatch
from window_operator.results import ErrorCode
from window_operator.runtime.batch import LocalJob
from window_operator.runtime.guard import ALL_FAILED_ROWS, add_guarded, decode_guarded
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.settings import TaskSettings, task_state_dir
from window_operator.spark.topics import prepare_topics

S = 1_000
BASE = 1_700_000_000_000
YEAR_3000 = 32_503_680_000_000
FAILING_SUM = {"name": "s", "op": "udf_example:FailsOnThirteenOp", "field": "v"}


def windows_of(results: list[Any]) -> dict[tuple[str, int], Any]:
    latest: dict[tuple[str, int], Any] = {}
    for r in results:
        latest[(r.key, r.window_start)] = r.values
    return latest


def test_rows_that_make_the_operator_raise_are_isolated(tmp_path: Path) -> None:
    runtime = runtime_for(aggregations=[{"name": "n", "op": "count"}, FAILING_SUM])
    store = TaskStore(task_state_dir(tmp_path, "test", 0))
    values = [1, 2, 13, 4, 5, 6, 13, 8, 9, 10]
    batch = EventBatch.from_columns(
        ["a"] * 10,
        [BASE + i * 100 for i in range(10)],
        numeric={"v": values},
        offset=list(range(10)),
    )
    try:
        first = runtime.operator(store)
        applied = add_guarded(
            lambda: runtime.operator(store), first, batch, EventBatch.take, len(batch)
        )
        assert applied.operator is not first  # the one that raised is dropped
        assert [row for row, _ in applied.failed] == [2, 6]
        assert all(isinstance(exc, ValueError) for _, exc in applied.failed)
        assert applied.applied == 8
        applied.operator.timeout(2**62)
        got = windows_of(applied.operator.get_result())
        assert got == {("a", BASE): {"n": 8, "s": float(sum(values) - 26)}}
    finally:
        store.close()


def test_a_small_batch_whose_every_row_fails_rejects_each_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two rows that each make the operation raise, and no other, were taken for an
    operator that fails whatever it is given: the task failed, at every retry and
    every restart, where either row alone (or beside a good one) was rejected."""
    runtime = runtime_for(aggregations=[{"name": "n", "op": "count"}, FAILING_SUM])
    store = TaskStore(task_state_dir(tmp_path, "test", 0))
    batch = EventBatch.from_columns(["a", "b"], [BASE, BASE], numeric={"v": [13.0, 13.0]})
    try:
        applied = add_guarded(
            lambda: runtime.operator(store), runtime.operator(store), batch, EventBatch.take, 2
        )
        assert [row for row, _ in applied.failed] == [0, 1] and applied.applied == 0
        assert all(isinstance(exc, ValueError) for _, exc in applied.failed)
        assert "every record of a batch of 2 made the operator raise (ValueError" in caplog.text
    finally:
        store.close()


def test_an_operator_that_fails_on_everything_is_not_blamed_on_the_records(
    tmp_path: Path,
) -> None:
    """More than ALL_FAILED_ROWS rows that all fail: the operation fails whatever it is
    given (a bug), and the task fails rather than send all its input to the errors."""
    runtime = runtime_for(aggregations=[{"name": "n", "op": "count"}, FAILING_SUM])
    store = TaskStore(task_state_dir(tmp_path, "test", 0))
    n = ALL_FAILED_ROWS + 1
    batch = EventBatch.from_columns(["a"] * n, [BASE] * n, numeric={"v": [13.0] * n})
    try:
        with pytest.raises(ValueError, match="13"):
            add_guarded(
                lambda: runtime.operator(store), runtime.operator(store), batch, EventBatch.take, n
            )
    finally:
        store.close()


class _BuggyPayloads(JsonPayloadDecoder):
    """A payload decoder with a bug on one payload (the boundary this test isolates)."""

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        if b"poison" in payloads:
            raise KeyError("a bug")
        return super().decode(payloads)


def test_a_payload_whose_decoding_raises_becomes_an_error_record() -> None:
    decoder = runtime_for().decoder
    payloads: list[bytes | None] = [b'{"k":"a","ts":1}', b"poison", b"broken", b'{"k":"b","ts":2}']
    result = decode_guarded(
        InputDecoder(_BuggyPayloads(), decoder),
        payloads,
        topic="in",
        partition=2,
        offsets=[7, 8, 9, 10],
    )
    assert result.kept == [0, 3] and result.batch.keys == ["a", "b"]
    assert result.batch.offset.tolist() == [7, 10]
    assert [(e.code, e.offset) for e in result.errors] == [
        (ErrorCode.INTERNAL_ERROR, 8),
        (ErrorCode.BAD_JSON, 9),
    ]
    internal = result.errors[0]
    assert internal.topic == "in" and internal.partition == 2 and internal.raw == b"poison"
    assert "KeyError" in internal.reason


def _runner(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], **cfg: Any
) -> tuple[LocalJob, Any, str]:
    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 1)
    config = runtime_for(
        job=unique_name("job"), input={"topic": topic, "key": "k", "timestamp": "ts"}, **cfg
    ).config
    tasks = prepare_topics(config, kafka_bootstrap)
    return LocalJob(TaskSettings(config, kafka_bootstrap, str(tmp_path), tasks)), config, topic


def _input(topic: str, events: list[dict[str, Any]], stamps: list[int] | None) -> InputRecords:
    return InputRecords(
        topic=topic,
        partition=0,
        offsets=list(range(len(events))),
        keys=[str(e["k"]).encode() for e in events],
        values=[orjson.dumps(e) for e in events],
        timestamps=stamps,
    )


@pytest.mark.kafka
def test_a_task_reports_a_failing_record_and_applies_the_rest(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    runner, config, topic = _runner(
        tmp_path,
        kafka_bootstrap,
        unique_name,
        aggregations=[{"name": "n", "op": "count"}, FAILING_SUM],
    )
    events = [{"k": "a", "ts": BASE + i * 100, "v": v} for i, v in enumerate([1, 13, 2, 3])]
    events.append({"k": "a", "ts": BASE + 60 * S, "v": 1})  # fires the first window
    # the input is in Kafka (the error record of a failing row carries the original bytes)
    produce(kafka_bootstrap, topic, events, key_field="k", partitions=1)
    batch = _input(topic, events, None)
    report = runner.run_batch([batch], 1_000).tasks[0]
    assert (report.applied, report.rejected) == (4, 1)
    again = runner.run_batch([batch], 2_000).tasks[0]  # Spark re-delivers: nothing twice
    assert (again.applied, again.replayed, again.rejected) == (0, 5, 0)
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    assert len(errors) == 1
    headers = {k: v.decode() for k, v in errors[0].headers()}
    assert headers["error.code"] == "INTERNAL_ERROR" and "ValueError" in headers["error.reason"]
    assert (headers["source.topic"], headers["source.partition"], headers["source.offset"]) == (
        topic,
        "0",
        "1",
    )
    assert errors[0].key() == b"a" and errors[0].value() == batch.values[1]
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    assert [(r["window_start"], r["values"]) for r in results] == [(BASE, {"n": 3, "s": 6.0})]


@pytest.mark.kafka
def test_far_future_events_are_rejected_by_their_kafka_timestamp(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    runner, config, topic = _runner(tmp_path, kafka_bootstrap, unique_name)
    events = [{"k": "a", "ts": BASE + i * S} for i in range(30)]
    events.insert(10, {"k": "a", "ts": YEAR_3000})
    stamps = [BASE + 30 * S] * len(events)
    stamps[20] = -1  # a record without a timestamp is not checked
    report = runner.run_batch([_input(topic, events, stamps)], 1_000).tasks[0]
    assert (report.applied, report.rejected) == (30, 1)
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    headers = {k: v.decode() for k, v in errors[0].headers()}
    assert headers["error.code"] == "FUTURE_TIMESTAMP" and headers["source.offset"] == "10"
    assert report.watermark < YEAR_3000


@pytest.mark.kafka
def test_a_result_that_cannot_be_made_goes_to_the_errors_and_the_rest_is_written(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A user ``finish`` that raises for one window: that result is a RESULT_ERROR record
    in the error topic (not a rejected input), the other windows are written, and a
    re-delivered batch sends neither twice."""
    aggs = [{"name": "s", "op": "udf_example:FinishFailsOverTenOp", "field": "v"}]
    runner, config, topic = _runner(tmp_path, kafka_bootstrap, unique_name, aggregations=aggs)
    events = [{"k": k, "ts": BASE + i * 100, "v": v} for i, (k, v) in
              enumerate([("a", 1), ("b", 6), ("a", 2), ("b", 6)])]  # fmt: skip
    events.append({"k": "a", "ts": BASE + 60 * S, "v": 1})  # fires the first windows
    batch = _input(topic, events, None)
    report = runner.run_batch([batch], 1_000).tasks[0]
    assert (report.applied, report.rejected, report.results, report.result_errors) == (5, 0, 1, 1)
    assert report.rejected_by_code == {}  # not an input record
    again = runner.run_batch([batch], 2_000).tasks[0]
    assert (again.replayed, again.results, again.result_errors) == (5, 0, 0)
    (error,) = read_topic(kafka_bootstrap, config.output.errors_topic)
    headers = {k: v.decode() for k, v in error.headers()}
    assert headers == {
        "error.code": "RESULT_ERROR",
        "error.reason": f"the ON_TIME result of key 'b', window [{BASE}, {BASE + 10 * S}): "
        "aggregation 's': finish raised ValueError: a sum of 12.0 is over 10",
    }
    assert error.key() == result_key("b", BASE, BASE + 10 * S) and error.value() is None
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    assert [(r["key"], r["values"]) for r in results] == [("a", {"s": 3.0})]


@pytest.mark.kafka
def test_sys_exit_in_user_code_fails_the_task_with_an_error_not_an_exit(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """``sys.exit`` in a user ``accumulate`` rejects that record; in a ``combine`` run
    while windows fire (no record to blame) the task fails with UserCodeExitError, an
    exception Spark reports and retries, not a SystemExit that ends the worker process
    with the status user code chose."""
    aggs = [{"name": "s", "op": "udf_example:ExitingOp", "field": "v"}]
    runner, _, topic = _runner(tmp_path, kafka_bootstrap, unique_name, aggregations=aggs)
    events = [{"k": "a", "ts": BASE + i * 100, "v": v} for i, v in enumerate([1, 13, 2])]
    report = runner.run_batch([_input(topic, events, None)], 1_000).tasks[0]
    assert (report.applied, report.rejected_by_code) == (2, {"INTERNAL_ERROR": 1})
    aggs[0]["params"] = {"combine_exits": True}
    window = {"type": "hopping", "size": "10s", "step": "5s"}
    runner, _, topic = _runner(
        tmp_path, kafka_bootstrap, unique_name, aggregations=aggs, window=window
    )
    events.append({"k": "a", "ts": BASE + 60 * S, "v": 1})  # fires the first windows
    with pytest.raises(UserCodeExitError, match=r"sys.exit\(3\) in combine"):
        runner.run_batch([_input(topic, events[:1] + events[2:], None)], 1_000)
