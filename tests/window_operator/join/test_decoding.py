"""Decoding one input's records into join rows: the fast column path and the per-record
path agree, bad records become error records, and rows name their source."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from window_operator.config import JoinInputConfig
from window_operator.join import LEFT, RIGHT, JoinDecoder, JoinRecord, JoinRows
from window_operator.rejections import RecordRejected
from window_operator.results import ErrorCode

SIDE = JoinInputConfig(name="orders", topic="orders-topic", timestamp="ts")
NESTED_300: list[Any] = []
for _ in range(299):
    NESTED_300 = [NESTED_300]


def test_one_record_decodes_to_key_time_and_json() -> None:
    dec = JoinDecoder(SIDE, ["id", "region"], RIGHT)
    got = dec.decode_one({"id": 3, "region": "eu", "ts": 7, "x": None})
    assert got == JoinRecord((3, "eu"), 7, b'{"id":3,"region":"eu","ts":7,"x":null}')
    narrow = JoinDecoder(SIDE.model_copy(update={"fields": ("x", "y")}), ["id"], LEFT)
    assert narrow.decode_one({"id": 3, "ts": 7, "x": 1}) == JoinRecord(3, 7, b'{"x":1,"y":null}')


@pytest.mark.parametrize(
    ("record", "code"),
    [
        ([1], ErrorCode.NOT_AN_OBJECT),
        ({"id": 1}, ErrorCode.MISSING_TIMESTAMP),
        ({"ts": 1}, ErrorCode.MISSING_FIELD),
        ({"id": None, "ts": 1}, ErrorCode.MISSING_FIELD),
        ({"id": 1.0, "ts": 1}, ErrorCode.WRONG_TYPE),
        ({"id": False, "ts": 1}, ErrorCode.WRONG_TYPE),
        ({"id": 2**63, "ts": 1}, ErrorCode.WRONG_TYPE),
        ({"id": "x" * 5000, "ts": 1}, ErrorCode.BAD_KEY),
        # orjson writes 254 levels at most: before, the task failed on it, every retry
        ({"id": 1, "ts": 1, "v": NESTED_300}, ErrorCode.WRONG_TYPE),
    ],
)
def test_bad_records_are_rejected_with_a_code(record: Any, code: ErrorCode) -> None:
    with pytest.raises(RecordRejected) as info:
        JoinDecoder(SIDE, ["id"], LEFT).decode_one(record)
    assert info.value.code is code
    # the column path (which takes chunks of clean records) agrees
    got = JoinDecoder(SIDE, ["id"], LEFT).decode_records([record, {"id": 2, "ts": 1}])
    assert got.kept == [1] and [e.code for e in got.errors] == [code]


def test_a_record_not_an_object_is_named_as_the_aggregations_name_it() -> None:
    """Before, a join said "got list" where an aggregation says "got array [1,2]"."""
    with pytest.raises(RecordRejected, match=r"got array \[1,2\]$"):
        JoinDecoder(SIDE, ["id"], LEFT).decode_one([1, 2])


def test_a_non_finite_number_in_the_carried_record_is_written_as_null() -> None:
    """JSON has no NaN: the record joins, and its results show null there (rejecting
    it would lose the matches of a record whose unrelated field is a NaN, as pandas
    writes for a missing double)."""
    dec = JoinDecoder(SIDE, ["id"], LEFT)
    record = {"id": 3, "ts": 7, "v": float("nan"), "w": [float("-inf")]}
    want = JoinRecord(3, 7, b'{"id":3,"ts":7,"v":null,"w":[null]}')
    assert dec.decode_one(record) == want
    got = dec.decode_records([record])
    assert (got.kept, got.errors, got.rows.records) == ([0], [], [want.json])


RECORDS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "id": st.one_of(st.integers(-5, 5), st.sampled_from(["a", "é", ""])),
                "ts": st.integers(0, 99),
            }
        ),
        st.fixed_dictionaries({"id": st.none(), "ts": st.integers(0, 9)}),
        st.fixed_dictionaries({"id": st.integers(0, 3)}),
    ),
    max_size=8,
)


@given(records=RECORDS)
def test_column_and_record_paths_give_the_same_rows_and_errors(
    records: list[dict[str, Any]],
) -> None:
    dec = JoinDecoder(SIDE, ["id"], RIGHT)
    offsets = list(range(10, 10 + len(records)))
    got = dec.decode_records(records, partitions=[1] * len(records), offsets=offsets)
    want_rows, want_errors = [], []
    for i, record in enumerate(records):
        try:
            want_rows.append((i, dec.decode_one(record)))
        except RecordRejected as rej:
            want_errors.append((rej.code, 1, offsets[i], "orders-topic"))
    rows = got.rows
    assert rows.source == RIGHT and got.kept == [i for i, _ in want_rows]
    columns = zip(rows.keys, rows.ts.tolist(), rows.records, strict=True)
    assert [JoinRecord(k, t, r) for k, t, r in columns] == [r for _, r in want_rows]
    assert rows.offset.tolist() == [offsets[i] for i in got.kept]
    assert [(e.code, e.partition, e.offset, e.topic) for e in got.errors] == want_errors


def test_rows_from_columns_check_their_lengths() -> None:
    rows = JoinRows.from_columns([1, 2], [5, 6], [b"{}", b"{}"], source=LEFT, partition=3)
    assert (rows.source, rows.partition.tolist(), rows.offset.tolist()) == (LEFT, [3, 3], [-1, -1])
    assert rows.wall_ms is None and len(rows) == 2
    with pytest.raises(ValueError, match="column records has 1 rows"):
        JoinRows.from_columns([1, 2], [5, 6], [b"{}"], source=LEFT)
    with pytest.raises(ValueError, match="column wall_ms"):
        JoinRows.from_columns([1], [5], [b"{}"], source=LEFT, wall_ms=[1, 2])
    one = JoinRows.one(RIGHT, JoinRecord("k", 9, b"{}"), 2, 40, None)
    assert (one.source, one.keys, one.partition.tolist(), one.offset.tolist()) == (
        RIGHT,
        ["k"],
        [2],
        [40],
    )
    assert isinstance(one.ts, np.ndarray) and one.ts.tolist() == [9]


def test_rows_from_columns_take_the_json_of_objects_only() -> None:
    """The operator stores a record's bytes as given and reads them only to write a
    result: a record that is not the JSON of an object is refused when the rows are
    built (a user walkthrough passed text, which failed at the flush, and bytes that
    were not JSON, which failed on the next valid record that matched them)."""
    rows = JoinRows.from_columns([1, 2], [5, 6], ['{"id": 1}', bytearray(b"{}")], source=LEFT)
    assert rows.records == [b'{"id": 1}', b"{}"]
    with pytest.raises(ValueError, match=r"records\[1\] is not JSON"):
        JoinRows.from_columns([1, 2], [5, 6], [b"{}", b"not json"], source=LEFT)
    with pytest.raises(ValueError, match=r"records\[0\] is JSON but not an object"):
        JoinRows.from_columns([1], [5], [b"[1]"], source=LEFT)
    with pytest.raises(ValueError, match=r"records\[0\] is a dict, not the JSON of an object"):
        JoinRows.from_columns([1], [5], [{"id": 1}], source=LEFT)  # type: ignore[list-item]
