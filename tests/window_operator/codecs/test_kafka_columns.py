"""The Kafka record's timestamp and key as the event time and the key (``timestamp_from:
kafka``, ``key_from: kafka``): the record decoder, the columnar path and the join decoder
read them beside the records, and judge a missing or bad one as they judge a bad field."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from window_operator.codecs.fastjson import ColumnarJsonDecoder
from window_operator.codecs.inputs import InputDecoder
from window_operator.codecs.json_input import JsonPayloadDecoder
from window_operator.config import JoinInputConfig
from window_operator.errors import InvalidArgumentError
from window_operator.eventkey import KEY_FORMATS, KeyFormat, kafka_key_text
from window_operator.events import RecordDecoder
from window_operator.eventtime import MAX_ABS_TS, record_time_ms
from window_operator.join import LEFT, JoinDecoder, JoinRecord
from window_operator.rejections import RecordRejected
from window_operator.results import ErrorCode

DECODER = RecordDecoder(key_field="k", timestamp_field=None, numeric_fields=["v"])
SIDE = JoinInputConfig(name="orders", timestamp_from="kafka")

event = st.fixed_dictionaries(
    {"k": st.sampled_from(["a", "b", "é"]), "v": st.integers(-5, 5)},
    optional={"ts": st.one_of(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1))},  # unread
)
stamp = st.one_of(st.integers(0, 2**45), st.just(-1), st.just(MAX_ABS_TS))


def test_the_record_time_is_the_event_time_and_a_time_field_is_not_read() -> None:
    got = DECODER.decode_records(
        [{"k": "a", "v": 1, "ts": "yesterday"}, {"k": "b", "v": 2}], record_times=[5, 7]
    )
    assert got.errors == [] and got.kept == [0, 1]
    assert got.batch.ts.tolist() == [5, 7]
    assert DECODER.decode_one({"k": "a", "v": 1}, 9).ts == 9


@pytest.mark.parametrize(
    ("stamp", "code", "reason"),
    [
        (-1, ErrorCode.MISSING_TIMESTAMP, "the record has no Kafka timestamp"),
        (None, ErrorCode.MISSING_TIMESTAMP, "the record has no Kafka timestamp"),
        (-5, ErrorCode.BAD_TIMESTAMP, "the Kafka record timestamp -5 is negative"),
        (MAX_ABS_TS, ErrorCode.BAD_TIMESTAMP, f"the Kafka record timestamp {MAX_ABS_TS} is"),
    ],
)
def test_a_record_without_a_usable_time_is_rejected(
    stamp: int | None, code: ErrorCode, reason: str
) -> None:
    with pytest.raises(RecordRejected) as info:
        record_time_ms(stamp)
    assert info.value.code is code and info.value.reason.startswith(reason)
    with pytest.raises(RecordRejected):
        DECODER.decode_one({"k": "a", "v": 1}, stamp)
    if stamp is not None:
        got = DECODER.decode_records(
            [{"k": "a", "v": 1}, {"k": "b", "v": 1}], record_times=[3, stamp]
        )
        assert got.kept == [0] and [e.code for e in got.errors] == [code]


def test_without_record_times_every_record_is_rejected_and_other_faults_come_first() -> None:
    got = DECODER.decode_records([{"k": "a", "v": 1}, [1]])
    assert [e.code for e in got.errors] == [ErrorCode.MISSING_TIMESTAMP, ErrorCode.NOT_AN_OBJECT]
    got = DECODER.decode_records([{"k": "a", "v": "x"}], record_times=[-1])
    assert [e.code for e in got.errors] == [ErrorCode.WRONG_TYPE]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(event, stamp), min_size=1, max_size=20))
def test_the_columnar_path_equals_the_exact_path_or_declines(rows: list[Any]) -> None:
    lines = [orjson.dumps(e) for e, _ in rows]
    times = [t for _, t in rows]
    exact = DECODER.decode_records([e for e, _ in rows], record_times=times)
    fast = ColumnarJsonDecoder(DECODER).decode(lines, times)
    if all(0 <= t < MAX_ABS_TS for t in times):
        assert fast is not None  # clean chunks keep the fast path
    if fast is None:
        return
    assert exact.errors == []
    assert fast.keys == exact.batch.keys and fast.ts.tolist() == times
    np.testing.assert_array_equal(fast.numeric["v"], exact.batch.numeric["v"])
    assert ColumnarJsonDecoder(DECODER).decode(lines) is None  # no times: declined


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(event, stamp), min_size=1, max_size=12))
def test_the_job_decoder_gives_every_payload_one_verdict(rows: list[Any]) -> None:
    """The columnar path or record by record, the same rows and the same errors."""
    payloads = [orjson.dumps(e) for e, _ in rows]
    times = [t for _, t in rows]
    offsets = list(range(len(rows)))
    both = [
        InputDecoder(JsonPayloadDecoder(), DECODER, columnar).decode(
            payloads, partition=2, offsets=offsets, topic="in", record_times=times
        )
        for columnar in (ColumnarJsonDecoder(DECODER), None)
    ]
    for got in both:
        assert got.kept == [i for i, t in enumerate(times) if 0 <= t < MAX_ABS_TS]
        assert got.batch.ts.tolist() == [times[i] for i in got.kept]
        assert [(e.partition, e.offset, e.topic) for e in got.errors] == [
            (2, i, "in") for i in offsets if i not in got.kept
        ]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.fixed_dictionaries({"id": st.integers(0, 3)}), stamp), max_size=8))
def test_a_join_side_reads_the_record_time_on_both_paths(rows: list[Any]) -> None:
    dec = JoinDecoder(SIDE, ["id"], LEFT)
    records, times = [r for r, _ in rows], [t for _, t in rows]
    got = dec.decode_records(records, record_times=np.asarray(times, dtype=np.int64))
    want = [i for i, t in enumerate(times) if 0 <= t < MAX_ABS_TS]
    assert got.kept == want and got.rows.ts.tolist() == [times[i] for i in want]
    for i, record in enumerate(records):
        if i in want:
            assert dec.decode_one(record, times[i]) == JoinRecord(
                record["id"], times[i], orjson.dumps(record)
            )
    codes = {ErrorCode.MISSING_TIMESTAMP, ErrorCode.BAD_TIMESTAMP}
    assert {e.code for e in got.errors} <= codes
    assert dec.event_time(records[0] if records else {}) is None  # no far-future check


KEYED = RecordDecoder(key_field=None, timestamp_field="ts", numeric_fields=["v"], kafka_key=True)
kafka_key = st.one_of(
    st.sampled_from([b"a", b"b", "é".encode(), b"", None, b"\xff", b"x" * 4097]),
    st.binary(max_size=9),  # 4 and 8 bytes: keys of key_format int and long
)


def test_the_kafka_key_is_the_key_as_text_and_a_key_field_is_not_read() -> None:
    got = KEYED.decode_records(
        [{"page": 1, "ts": 5, "v": 1}, {"ts": 6, "v": 2}], record_keys=[b"/a", "é".encode()]
    )
    assert got.errors == [] and got.batch.keys == ["/a", "é"]
    assert KEYED.decode_one({"ts": 1, "v": 1}, record_key="k").key == "k"
    with pytest.raises(InvalidArgumentError):
        RecordDecoder(key_field="page", timestamp_field="ts", kafka_key=True)


@pytest.mark.parametrize(
    ("key", "code", "reason"),
    [
        (None, ErrorCode.MISSING_KEY, "the record has no Kafka key"),
        (b"\xff\xfe", ErrorCode.BAD_KEY, "the Kafka record key is not UTF-8 text"),
        (b"x" * 4097, ErrorCode.BAD_KEY, "the Kafka record key is 4097 bytes; the limit is"),
        ("\ud800", ErrorCode.BAD_KEY, "the Kafka record key is not valid Unicode"),
        (5, ErrorCode.BAD_KEY, "a Kafka record key is text (a string), got"),
    ],
)
def test_a_record_without_a_usable_kafka_key_is_rejected(
    key: object, code: ErrorCode, reason: str
) -> None:
    with pytest.raises(RecordRejected) as info:
        kafka_key_text(key, 4096)
    assert info.value.code is code and info.value.reason.startswith(reason)
    got = KEYED.decode_records([{"ts": 1, "v": 1}, {"ts": 1, "v": 1}], record_keys=[b"a", key])
    assert got.kept == [0] and [e.code for e in got.errors] == [code]
    assert [e.code for e in KEYED.decode_records([{"ts": 1, "v": 1}]).errors] == [
        ErrorCode.MISSING_KEY  # no keys given
    ]


@pytest.mark.parametrize("key_format", KEY_FORMATS)
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(event, stamp, kafka_key), min_size=1, max_size=12))
def test_both_from_kafka_the_job_decoder_gives_every_payload_one_verdict(
    key_format: KeyFormat, rows: list[Any]
) -> None:
    """The columnar path or record by record: the same rows and the same errors, in every
    key format."""
    both = RecordDecoder(
        key_field=None,
        timestamp_field=None,
        numeric_fields=["v"],
        kafka_key=True,
        key_format=key_format,
    )
    payloads = [orjson.dumps(e) for e, _, _ in rows]
    times, keys = [t for _, t, _ in rows], [k for _, _, k in rows]
    results = [
        InputDecoder(JsonPayloadDecoder(), both, columnar).decode(
            payloads,
            partition=0,
            offsets=list(range(len(rows))),
            topic="in",
            record_times=times,
            record_keys=keys,
        )  # fmt: skip
        for columnar in (ColumnarJsonDecoder(both), None)
    ]
    want = []
    for i, (t, k) in enumerate(zip(times, keys, strict=True)):
        try:
            want.append((i, kafka_key_text(k, 4096, key_format), record_time_ms(t)))
        except RecordRejected:
            pass
    if len(want) == len(rows):  # nothing to reject: the fast path takes the chunk
        assert ColumnarJsonDecoder(both).decode(payloads, times, keys) is not None
    for got in results:
        assert list(zip(got.kept, got.batch.keys, got.batch.ts.tolist(), strict=True)) == want
        assert len(got.errors) == len(rows) - len(want)
