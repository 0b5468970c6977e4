"""The job factory: operations, decoder and policies from a config; problems name fields."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from helpers import BASE_CONFIG, runtime_for

from stores.rocks import ColumnFamily, TaskStore
from window_operator.codecs import ColumnarJsonDecoder, JsonPayloadDecoder, decode_payloads
from window_operator.config import ConfigError, parse_config
from window_operator.count_windows import CountWindowAggregator
from window_operator.errors import IncompatibleStateError, InvalidArgumentError
from window_operator.job import build_runtime
from window_operator.kernel import StepStats
from window_operator.kernel.checkpoint import CHECKPOINT_KEY
from window_operator.policies import END_OF_TIME
from window_operator.runtime.settings import task_state_dir
from window_operator.session import SessionAggregator
from window_operator.timewindows import WindowedAggregator
from window_operator.windows import TimeWindowing


def test_every_window_shape_gets_its_operator(tmp_path: Path) -> None:
    shapes = [
        ({"type": "tumbling", "size": "10s"}, WindowedAggregator),
        ({"type": "session", "gap": "10s"}, SessionAggregator),
        ({"type": "count", "size": 5}, CountWindowAggregator),
    ]
    for i, (window, kind) in enumerate(shapes):
        op = runtime_for(window=window).open_task(tmp_path / str(i))
        try:
            assert isinstance(op, kind)
        finally:
            op.close()


def test_retention_size_caps_the_retention_of_time_windows() -> None:
    rt = runtime_for(
        window={"type": "hopping", "size": "1m", "step": "10s"},
        retention={"time": "1h", "size": 3},
    )
    assert rt.policy.retention == 30_000
    assert rt.decoder.numeric_fields == ()


def test_operation_problems_are_config_errors_naming_the_field() -> None:
    doc = {**BASE_CONFIG, "aggregations": [{"name": "x", "op": "nonesuch"}]}
    with pytest.raises(ConfigError, match=r"aggregations\.0\.op"):
        build_runtime(parse_config(doc, base_dir=Path(".")))


@pytest.mark.parametrize(
    ("op", "params", "where", "what"),
    [
        ("no_such_module_xyz:Op", {}, "op", "cannot import module 'no_such_module_xyz'"),
        ("math.pi", {}, "op", "not a class"),
        ("percentile", {"q": 2}, "params", "q"),
    ],
)
def test_an_op_that_cannot_be_loaded_is_named_at_op_and_bad_params_at_params(
    op: str, params: dict[str, object], where: str, what: str
) -> None:
    aggs = [{"name": "n", "op": "count"}, {"name": "x", "op": op, "field": "v", "params": params}]
    doc = {**BASE_CONFIG, "aggregations": aggs}
    with pytest.raises(ConfigError) as info:
        build_runtime(parse_config(doc, base_dir=Path(".")))
    (problem,) = info.value.problems
    assert problem.path == f"aggregations.1.{where}" and what in problem.message


def test_count_of_a_field_counts_its_non_null_values_of_any_type(tmp_path: Path) -> None:
    """SQL's ``COUNT(field)``: a string, boolean or object counts, a null does not; a
    field that also feeds a numeric operation must still be a number."""
    rt = runtime_for(
        aggregations=[
            {"name": "users", "op": "count", "field": "user"},
            {"name": "n_v", "op": "count", "field": "v"},
            {"name": "s", "op": "sum", "field": "v"},
        ]
    )
    assert rt.decoder.counted_fields == ("user",)
    users = ["u1", None, True, {"id": 7}, 3.5, "", [None]]
    lines = [
        orjson.dumps({"k": "a", "ts": 1000 + i, "user": u, "v": i}) for i, u in enumerate(users)
    ]
    bad = [
        orjson.dumps({"k": "a", "ts": 1, "v": 1}),  # no user: MISSING_FIELD
        b'{"k":"a","ts":1,"user":NaN,"v":1}',
        orjson.dumps({"k": "a", "ts": 1, "user": "u", "v": "1"}),  # sum needs a number
    ]
    exact = decode_payloads(lines + bad, JsonPayloadDecoder(), rt.decoder)
    assert [e.code.value for e in exact.errors] == [
        "MISSING_FIELD",
        "NON_FINITE_VALUE",
        "WRONG_TYPE",
    ]
    user = exact.batch.numeric["user"]
    assert np.isnan(user).tolist() == [False, True] + [False] * 5
    assert not math.isnan(user[0]) and set(user[~np.isnan(user)].tolist()) == {1.0}
    numbers = [orjson.dumps({"k": "a", "ts": 1000 + i, "user": i, "v": i}) for i in range(3)]
    fast = ColumnarJsonDecoder(rt.decoder).decode(numbers)
    assert fast is not None and fast.numeric["user"].tolist() == [1.0, 1.0, 1.0]
    assert ColumnarJsonDecoder(rt.decoder).decode(lines[:1]) is None  # a string: exact path
    op = rt.open_task(tmp_path / "t")
    try:
        op.add_batch(exact.batch)
        op.timeout(END_OF_TIME)
        (result,) = [r for batch in op.take_result_batches() for r in batch.to_results()]
        assert result.values == {"users": 6, "n_v": 7, "s": 21.0}
    finally:
        op.close()


def test_the_state_signature_is_what_the_accumulators_depend_on() -> None:
    """Operation, field and x field in order, not the name; a user-defined operation's
    params too (they may shape its accumulator), a builtin's not (``q`` and ``ddof``
    only shape the result)."""

    def signature(aggregations: list[dict[str, object]]) -> list[object]:
        return runtime_for(aggregations=aggregations).aggregations.signature()

    assert signature(
        [
            {"name": "n", "op": "count"},
            {"name": "p", "op": "percentile", "field": "v", "params": {"q": 0.9}},
            {"name": "fit", "op": "linreg", "field": "v", "params": {"x": "w"}},
        ]
    ) == [["count", None, None], ["percentile", "v", None], ["linreg", "v", "w"]]
    assert signature(
        [{"name": "p", "op": "percentile", "field": "v", "params": {"q": 0.5}}]
    ) == signature([{"name": "other", "op": "percentile", "field": "v", "params": {"q": 0.1}}])
    by_path = "window_operator.aggregations.moments:VarianceOp"
    pop = {"name": "x", "op": by_path, "field": "v", "params": {"ddof": 0}}
    assert signature([pop]) == [[[by_path, {"ddof": 0}], "v", None]]


SIGNATURE_OF_ODD_PARAMS = """
import orjson
from window_operator.aggregations import resolve_op
from window_operator.aggset import AggregationSet, BoundAggregation
params = {"s": {"b", "a", "c", "d"}, "w": {1: 0.5, "1": 2}, "n": 10**30, "d": {"x": [1, 2]}}
bound = BoundAggregation("x", resolve_op("count", {}), None, None, ["pkg:Op", params])
print(orjson.dumps(AggregationSet([bound]).signature()).decode())
"""


def test_a_user_operation_s_params_sign_the_state_alike_in_every_process() -> None:
    """YAML params JSON has no form for (a set, keys that are not strings, integers
    past 64 bits) sign the state by a stable text: a set's text changed with the hash
    seed (an unchanged job was refused at its restart), and the others raised."""
    import os
    import subprocess
    import sys

    runs = [
        subprocess.run(
            [sys.executable, "-c", SIGNATURE_OF_ODD_PARAMS],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout  # fmt: skip
        for seed in (1, 2, 3)
    ]
    assert runs[0] == runs[1] == runs[2]
    (row,) = orjson.loads(runs[0])
    assert row[0][1] == {
        "s": {"set": ["a", "b", "c", "d"]},
        "w": {"mapping": [["1", 2], [1, 0.5]]},
        "n": str(10**30),
        "d": {"x": [1, 2]},
    }


def test_either_spelling_of_a_user_operation_signs_the_state_alike() -> None:
    def signature(op: str) -> list[object]:
        agg = {"name": "v", "op": op, "field": "v", "params": {"ddof": 0}}
        return runtime_for(aggregations=[agg]).aggregations.signature()

    assert signature("window_operator.aggregations.moments:VarianceOp") == signature(
        "window_operator.aggregations.moments.VarianceOp"
    )


@pytest.mark.parametrize(
    ("window", "start"),
    [
        ({"type": "tumbling", "size": "10s"}, 0),
        ({"type": "session", "gap": "10s"}, 1_000),
        ({"type": "count", "size": 2}, 0),
    ],
)
def test_a_job_on_the_kafka_timestamp_takes_a_messages_wall_ms_as_its_time(
    tmp_path: Path, window: dict[str, str], start: int
) -> None:
    """In the library, ``add_message``'s ``wall_ms`` stands for the record timestamp,
    as in ``simulate``; a message without one is an error record. ``add_batch`` of
    records, which carry no timestamps, is refused, but for an empty one (nothing to
    refuse: a library loop over a source's batches)."""
    rt = runtime_for(input={"key": "k", "timestamp_from": "kafka"}, window=window)
    op = rt.open_task(tmp_path)
    try:
        assert op.add_batch([]) == StepStats()
        with pytest.raises(InvalidArgumentError, match="records alone do not carry"):
            op.add_batch([{"k": "a", "ts": 99}])  # no record timestamps: refused, unchanged
        op.add_message({"k": "a", "ts": 99}, wall_ms=1_000)
        op.add_message({"k": "a"})
        op.add_message({"k": "a"}, wall_ms=3_000)
        op.timeout(END_OF_TIME)
        results = op.get_result()
        assert [(r.key, r.window_start, r.values["n"]) for r in results] == [("a", start, 2)]
        assert [(e.code.name, e.offset) for e in op.get_errors()] == [("MISSING_TIMESTAMP", 1)]
    finally:
        op.close()


def test_a_job_on_the_kafka_key_takes_a_messages_kafka_key_as_its_key(tmp_path: Path) -> None:
    rt = runtime_for(input={"key_from": "kafka", "timestamp": "ts"})
    op = rt.open_task(tmp_path)
    try:
        assert op.add_batch([]) == StepStats()
        with pytest.raises(InvalidArgumentError, match="records alone do not carry"):
            op.add_batch([{"k": "a", "ts": 99}])
        op.add_message({"k": "x", "ts": 1_000}, kafka_key=b"a")
        op.add_message({"ts": 2_000}, kafka_key="a")
        op.add_message({"ts": 3_000})
        op.add_message({"ts": 4_000}, kafka_key=b"\xff")
        op.timeout(END_OF_TIME)
        assert [(r.key, r.window_start, r.values["n"]) for r in op.get_result()] == [("a", 0, 2)]
        codes = [(e.code.name, e.offset) for e in op.get_errors()]
        assert codes == [("MISSING_KEY", 2), ("BAD_KEY", 3)]
    finally:
        op.close()


def test_a_job_on_long_kafka_keys_takes_their_bytes_or_the_integer(tmp_path: Path) -> None:
    rt = runtime_for(input={"key_from": "kafka", "key_format": "long", "timestamp": "ts"})
    op = rt.open_task(tmp_path)
    try:
        op.add_message({"ts": 1_000}, kafka_key=(7).to_bytes(8, "big"))
        op.add_message({"ts": 2_000}, kafka_key=7)
        op.add_message({"ts": 3_000}, kafka_key="7")  # not an integer
        op.add_message({"ts": 4_000}, kafka_key=b"\x07")  # not 8 bytes
        op.timeout(END_OF_TIME)
        assert [(r.key, r.window_start, r.values["n"]) for r in op.get_result()] == [("7", 0, 2)]
        codes = [(e.code.name, e.offset) for e in op.get_errors()]
        assert codes == [("BAD_KEY", 2), ("BAD_KEY", 3)]
    finally:
        op.close()


@pytest.mark.parametrize(
    "window",
    [
        {"type": "tumbling", "size": "10s"},
        {"type": "session", "gap": "10s"},
        {"type": "count", "size": 5},
        {"type": "offsets", "size": 5},
    ],
)
def test_a_state_refuses_another_input_topic(tmp_path: Path, window: dict[str, Any]) -> None:
    """A state's positions are offsets of the topics it read: the state keeps their names
    (so does its changelog), and another topic is refused, also when the state comes
    into an empty directory from the changelog. Before, with the checkpoint directory new
    too, the new topic's records below the old positions were taken for replays (a
    walkthrough saw 175 of 251 records skipped without a word)."""

    def opened(topic: str) -> Any:
        rt = runtime_for(window=window, input={**BASE_CONFIG["input"], "topic": topic})
        return rt.open_task(tmp_path)

    op = opened("clicks")
    op.add_message({"k": "a", "ts": 1_000}, partition=0, offset=7)
    op.close()
    said = r'read input topics \["clicks"\], where this config reads \["clicks-v2"\]'
    with pytest.raises(IncompatibleStateError, match=said) as info:
        opened("clicks-v2")
    assert "its positions are offsets of those topics" in str(info.value)
    opened("clicks").close()  # the same topic continues it


def test_a_state_written_before_its_inputs_were_kept_is_continued(tmp_path: Path) -> None:
    """A state of an earlier version names no input topic (an operator built without
    them, as library use may, writes none): it is continued, and keeps them from then."""
    rt = runtime_for()
    store = TaskStore(task_state_dir(tmp_path, "test", 0))
    bare = WindowedAggregator(
        windowing=TimeWindowing(10_000, 10_000),
        aggregations=rt.aggregations,
        policy=rt.policy,
        store=store,
        decoder=rt.decoder,
    )
    bare.add_message({"k": "a", "ts": 1_000})
    bare.close()
    op = rt.open_task(tmp_path)
    assert op.offsets and _stored(op.store)["inputs"] is None
    op.add_message({"k": "a", "ts": 2_000})
    op.flush()
    assert _stored(op.store)["inputs"] == ["test-input"]
    assert "inputs" not in _stored(op.store)["shape"]  # which an earlier version compares
    op.close()


def _stored(store: TaskStore) -> dict[str, Any]:
    raw = store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY)
    assert raw is not None
    checkpoint: dict[str, Any] = orjson.loads(raw)
    return checkpoint
