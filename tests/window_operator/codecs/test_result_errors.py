"""Results that cannot be written become RESULT_ERROR records; the rest is written."""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from codeckit import small_config

from window_operator.codecs import (
    AvroResultEncoder,
    JsonResultEncoder,
    encode_checked,
    result_key,
)
from window_operator.codecs.result_json import dumps_json
from window_operator.config import JobConfig
from window_operator.results import ErrorCode, FailedValue, Kind, ResultBatch

RAISED = FailedValue("aggregation 'avg': finish raised ValueError: no", ValueError("no"))
#: without the exception too: no encoder may write a FailedValue in any form
BARE = FailedValue("aggregation 'tags': finish raised KeyError")


def avro_config(tmp_path: Path) -> JobConfig:
    return small_config(tmp_path, format="avro")


def batch_of(**values: list[Any]) -> ResultBatch:
    n = len(next(iter(values.values())))
    starts = np.arange(n, dtype=np.int64) * 10_000
    return ResultBatch(
        kind=Kind.ON_TIME,
        keys=[f"k{i}" for i in range(n)],
        window_start=starts,
        window_end=starts + 10_000,
        update_seq=np.zeros(n, dtype=np.int64),
        values=dict(values),
    )


def test_a_batch_that_can_be_written_is_encoded_once_as_it_is(tmp_path: Path) -> None:
    batch = batch_of(n=[1, 2], avg=[1.5, None], tags=[["a"], [2**70]])
    for encoder in (JsonResultEncoder(), AvroResultEncoder(avro_config(tmp_path))):
        checked = encode_checked(batch, encoder.encode_batch)
        assert checked.errors == []
        assert checked.records == encoder.encode_batch(batch)


def test_results_that_cannot_be_written_are_errors_and_the_rest_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # rows 1 and 4: finish raised; row 2: a set has no JSON form; rows 0 and 3 are fine
    # (an int beyond 64 bits is JSON, written by the stdlib fallback)
    batch = batch_of(
        n=[1, 2, 3, 4, 5],
        avg=[1.0, RAISED, 3.0, 4.0, 5.0],
        tags=[[], ["x"], [{"a", "b"}], [2**70], BARE],
    )
    for encoder in (JsonResultEncoder(), AvroResultEncoder(avro_config(tmp_path))):
        with caplog.at_level(logging.WARNING, "window_operator.codecs.result_errors"):
            checked = encode_checked(batch, encoder.encode_batch)
        assert checked.records == encoder.encode_batch(batch.take([0, 3]))
        assert [e.code for e in checked.errors] == [ErrorCode.RESULT_ERROR] * 3
        raised, unwritable, bare = (e.reason for e in checked.errors)
        assert bare.endswith("window [40000, 50000): aggregation 'tags': finish raised KeyError")
        assert raised == (
            "the ON_TIME result of key 'k1', window [10000, 20000): "
            "aggregation 'avg': finish raised ValueError: no"
        )
        assert unwritable.startswith(
            "the ON_TIME result of key 'k2', window [20000, 30000): "
            "aggregation 'tags': its value cannot be written: TypeError"
        )
        assert all(e.raw is None and e.partition is None for e in checked.errors)
        assert [e.key for e in checked.errors] == [
            result_key(f"k{i}", i * 10_000, (i + 1) * 10_000) for i in (1, 2, 4)
        ]
        summary, traceback = caplog.records
        assert summary.getMessage().endswith(": " + raised)  # the first of the batch
        assert traceback.getMessage() == "a user finish raised: " + raised
        assert traceback.exc_info is not None and traceback.exc_info[1] is RAISED.error
        assert "3 window result(s) not written" in summary.getMessage()
        caplog.clear()


def test_a_value_the_avro_schema_cannot_hold_is_an_error(tmp_path: Path) -> None:
    batch = batch_of(n=[1, 2], avg=["not a number", 2.0], tags=[[], []])
    encoder = AvroResultEncoder(avro_config(tmp_path))
    checked = encode_checked(batch, encoder.encode_batch)
    assert checked.records == encoder.encode_batch(batch.take([1]))
    (error,) = checked.errors
    assert "key 'k0'" in error.reason and "cannot be written" in error.reason


def test_a_window_of_one_partition_is_named_with_it() -> None:
    batch = batch_of(n=[1], avg=[RAISED], tags=[[]])
    batch.partition = np.array([7], dtype=np.int64)
    (error,) = encode_checked(batch, JsonResultEncoder().encode_batch).errors
    assert "window [0, 10000) of partition 7: aggregation 'avg'" in error.reason
    assert error.key == result_key("k0", 0, 10_000, 7)


def test_a_failed_value_an_encoder_would_drop_is_still_an_error(tmp_path: Path) -> None:
    """A user output schema without the aggregation's field writes the rest of the
    result: the window is still a RESULT_ERROR, not a result without its value."""
    schema = {
        "type": "record",
        "name": "Mine",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "values", "type": {"type": "record", "name": "V",
                                        "fields": [{"name": "n", "type": "long"}]}},
        ],
    }  # fmt: skip
    (tmp_path / "mine.avsc").write_bytes(orjson.dumps(schema))
    encoder = AvroResultEncoder(small_config(tmp_path, format="avro", avro_schema="mine.avsc"))
    batch = batch_of(n=[1, 2], avg=[RAISED, 2.0], tags=[[], []])
    assert len(encoder.encode_batch(batch)) == 2  # fastavro leaves the FailedValue out
    checked = encode_checked(batch, encoder.encode_batch)
    assert checked.records == encoder.encode_batch(batch.take([1]))
    assert [e.reason.split("): ")[1] for e in checked.errors] == [RAISED.reason]


def test_an_encoder_failing_otherwise_is_a_bug_and_raises() -> None:
    def broken(batch: ResultBatch) -> list[bytes]:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        encode_checked(batch_of(n=[1], avg=[1.0], tags=[[]]), broken)


def test_a_value_with_no_json_form_raises_instead_of_becoming_its_repr() -> None:
    assert dumps_json({"big": 2**70}) == b'{"big":1180591620717411303424}'
    with pytest.raises(TypeError, match="set"):
        dumps_json({"tags": {"a"}})


@pytest.mark.parametrize("value", [BARE, RAISED])
def test_no_encoder_writes_a_failed_value(tmp_path: Path, value: FailedValue) -> None:
    """Not even where it is the batch's only odd value (orjson would write a dataclass)."""
    batch = batch_of(n=[1], avg=[value], tags=[[]])
    for encoder in (JsonResultEncoder(), AvroResultEncoder(avro_config(tmp_path))):
        with pytest.raises((TypeError, ValueError, struct.error)):
            encoder.encode_batch(batch)
