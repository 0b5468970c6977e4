"""The grouping key read from the Kafka record key in each ``key_format``: the texts,
the rejections, and that ``simulate``'s key (the value a key stands for) and the bytes
``produce`` writes for it give one key."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from window_operator.eventkey import KEY_FORMATS, KeyFormat, kafka_key_bytes, kafka_key_text
from window_operator.rejections import RecordRejected
from window_operator.results import ErrorCode


@pytest.mark.parametrize(
    ("key", "key_format", "text"),
    [
        (b"/home", "string", "/home"),
        ("é", "string", "é"),
        (struct.pack(">q", 1234), "long", "1234"),
        (struct.pack(">q", -(2**63)), "long", str(-(2**63))),
        (1234, "long", "1234"),
        (struct.pack(">i", -5), "int", "-5"),
        (2**31 - 1, "int", str(2**31 - 1)),
        (b"\x00\xff\x10", "bytes", "00ff10"),
        (b"", "bytes", ""),
        ("00FF10", "bytes", "00ff10"),  # simulate's hexadecimal text, in one spelling
    ],
)
def test_each_format_reads_its_keys(key: object, key_format: KeyFormat, text: str) -> None:
    assert kafka_key_text(key, 4096, key_format) == text


@pytest.mark.parametrize(
    ("key", "key_format", "reason"),
    [
        (None, "long", "the record has no Kafka key"),
        (b"\xff\xfe", "string", "the Kafka record key is not UTF-8 text: b'\\xff\\xfe' "
         "(input.key_format reads other keys: long, int or bytes)"),
        (b"1234", "long", "the Kafka record key is 4 bytes: key_format long reads 8 "
         "(LongSerializer); got b'1234'"),
        (struct.pack(">q", 5), "int", "the Kafka record key is 8 bytes: key_format int reads 4"),
        (2**31, "int", "the Kafka record key 2147483648 does not fit key_format int (4 signed "
         "bytes)"),
        (-(2.0**64), "long", "the Kafka record key -18446744073709551616 does not fit "
         "key_format long (8 signed bytes)"),  # JSON's integer beyond 64 bits, a float
        ("12", "long", "a Kafka record key of key_format long is an integer, got string \"12\""),
        (True, "long", "a Kafka record key of key_format long is an integer, got boolean true"),
        ("0g", "bytes", "a Kafka record key of key_format bytes is given as hexadecimal text"),
        (b"x" * 2049, "bytes", "the Kafka record key's hexadecimal text is 4098 bytes; the "
         "limit is 4096"),
        (7, "string", "a Kafka record key is text (a string), got int 7 (input.key_format "
         "long or int reads integer keys)"),
    ],
)  # fmt: skip
def test_a_key_its_format_does_not_read_is_rejected_with_the_reason(
    key: object, key_format: KeyFormat, reason: str
) -> None:
    with pytest.raises(RecordRejected) as info:
        kafka_key_text(key, 4096, key_format)
    code = ErrorCode.MISSING_KEY if key is None else ErrorCode.BAD_KEY
    assert info.value.code is code and info.value.reason.startswith(reason), info.value.reason


#: what ``simulate`` reads as the key of each format (valid or not)
simulated = st.one_of(
    st.text(max_size=4),
    st.integers(-(2**64), 2**64),
    st.binary(max_size=9).map(bytes.hex),
    st.booleans(),
    st.none(),
)


@given(st.sampled_from(KEY_FORMATS), simulated)
def test_the_bytes_produce_writes_give_the_key_simulate_reads(
    key_format: KeyFormat, value: object
) -> None:
    written = kafka_key_bytes(value, key_format)
    try:
        want = kafka_key_text(value, 4096, key_format)
    except RecordRejected:
        assert written is None  # produce skips (and counts) the line
        return
    assert written is not None and kafka_key_text(written, 4096, key_format) == want


@given(st.sampled_from(KEY_FORMATS), st.binary(max_size=9), st.binary(max_size=9))
def test_two_record_keys_are_one_grouping_key_only_when_they_are_equal(
    key_format: KeyFormat, a: bytes, b: bytes
) -> None:
    try:
        ta, tb = kafka_key_text(a, 4096, key_format), kafka_key_text(b, 4096, key_format)
    except RecordRejected:
        return
    assert (ta == tb) == (a == b)
