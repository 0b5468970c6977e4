"""Property and edge-case tests of the order-preserving key schema in ``stores.keys``."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from keyref import (
    MessageKeyFieldsTsOffset,
    MessageKeyOffset,
    MessageKeyTsFieldsOffset,
    MessageKeyTsOffset,
    TimeFirstKey,
    decode_bytes,
    decode_key,
    decode_message_key_fields_ts_offset,
    decode_message_key_offset,
    decode_message_key_ts_fields_offset,
    decode_message_key_ts_offset,
    decode_time_first_key,
    encode_bytes,
    encode_key,
    key_first_key,
    message_key_fields_ts_offset,
    message_key_offset,
    message_key_ts_fields_offset,
    message_key_ts_offset,
    time_first_key,
)

from stores.keys import (
    I64_WIDTH,
    MAX_I64,
    MIN_I64,
    KeyEncodingError,
    KeyFirstKey,
    decode_fields,
    decode_i64,
    decode_key_first_key,
    decode_str,
    encode_fields,
    encode_i64,
    encode_str,
    prefix_upper_bound,
    ts_range,
)

# ----------------------------------------------------------------------------- strategies

i64s = st.one_of(
    st.integers(MIN_I64, MAX_I64),
    st.sampled_from([MIN_I64, MIN_I64 + 1, -256, -1, 0, 1, 255, 256, MAX_I64 - 1, MAX_I64]),
)
small_ints = st.integers(-3, 3)

# Characters chosen to hit the escaping (NUL, 0x01, 0xFF-adjacent code points) and
# multi-byte UTF-8 of every length.
_tricky_chars = st.sampled_from(
    ["\x00", "\x01", "\x7f", "a", "b", "\xfe", "\xff", "é", "\u07ff", "\uffff", "\U0001f600"]
)
tricky_text = st.text(_tricky_chars, max_size=6)
texts = st.one_of(st.text(), tricky_text)
# Few distinct values, so that keys share prefixes and collide often.
small_text = st.lists(st.sampled_from(["\x00", "a", "ab", "b"]), max_size=3).map("".join)


@st.composite
def text_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """Two strings, often one a prefix of the other."""
    a = draw(texts)
    kind = draw(st.sampled_from(["independent", "extension", "same"]))
    if kind == "independent":
        b = draw(texts)
    elif kind == "extension":
        b = a + draw(texts)
    else:
        b = a
    return (a, b) if draw(st.booleans()) else (b, a)


@st.composite
def bytes_pairs(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Two byte strings, often one a prefix of the other, rich in 0x00/0x01/0xFF."""
    raw = st.binary(max_size=8) | st.lists(st.sampled_from([0, 1, 2, 0xFE, 0xFF])).map(bytes)
    a = draw(raw)
    b = draw(st.one_of(raw, raw.map(lambda suffix: a + suffix), st.just(a)))
    return (a, b) if draw(st.booleans()) else (b, a)


_PART_STRATEGIES: dict[type, st.SearchStrategy[Any]] = {
    int: st.one_of(small_ints, i64s),
    str: st.one_of(small_text, texts),
}

SCHEMAS: list[tuple[type, ...]] = [(str, int), (int, str), (str, int, int), (int, str, int)]


def tuples_for(schema: Sequence[type]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(*(_PART_STRATEGIES[t] for t in schema))


def sign(x: int) -> int:
    return (x > 0) - (x < 0)


def cmp(a: Any, b: Any) -> int:
    return sign((a > b) - (a < b))


# ------------------------------------------------------------------------------- integers


@given(i64s, i64s)
def test_i64_order_and_round_trip(a: int, b: int) -> None:
    ea, eb = encode_i64(a), encode_i64(b)
    assert len(ea) == len(eb) == I64_WIDTH
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_i64(ea) == a
    assert decode_i64(b"xyz" + eb, 3) == b


def test_i64_extremes() -> None:
    assert encode_i64(MIN_I64) == b"\x00" * 8
    assert encode_i64(MAX_I64) == b"\xff" * 8
    assert encode_i64(-1) == b"\x7f" + b"\xff" * 7
    assert encode_i64(0) == b"\x80" + b"\x00" * 7
    assert decode_i64(encode_i64(MIN_I64)) == MIN_I64
    assert decode_i64(encode_i64(MAX_I64)) == MAX_I64


@pytest.mark.parametrize("bad", [MAX_I64 + 1, MIN_I64 - 1, 2**64, -(2**64), 2**63 + 5])
def test_i64_out_of_range_raises(bad: int) -> None:
    with pytest.raises(KeyEncodingError, match="signed 64-bit range"):
        encode_i64(bad)
    with pytest.raises(KeyEncodingError):
        encode_key("k", bad)


@pytest.mark.parametrize("bad", [True, False, 1.0, "1", None, b"\x01"])
def test_i64_rejects_non_int(bad: Any) -> None:
    with pytest.raises(KeyEncodingError):
        encode_i64(bad)


def test_i64_accepts_index_types() -> None:
    np = pytest.importorskip("numpy")
    assert encode_i64(np.int64(-7)) == encode_i64(-7)
    assert encode_key(np.int32(3)) == encode_i64(3)


@pytest.mark.parametrize(("data", "pos"), [(b"", 0), (b"\x00" * 7, 0), (b"\x00" * 8, 1)])
def test_decode_i64_truncated_raises(data: bytes, pos: int) -> None:
    with pytest.raises(KeyEncodingError, match="truncated"):
        decode_i64(data, pos)


def test_decode_i64_negative_pos_raises() -> None:
    with pytest.raises(KeyEncodingError):
        decode_i64(b"\x00" * 16, -8)


# -------------------------------------------------------------------- strings and bytes


@given(text_pairs())
def test_str_order_and_round_trip(pair: tuple[str, str]) -> None:
    a, b = pair
    ea, eb = encode_str(a), encode_str(b)
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_str(ea) == (a, len(ea))
    assert decode_str(ea + eb, len(ea)) == (b, len(ea) + len(eb))


@given(text_pairs())
def test_str_encodings_are_prefix_free(pair: tuple[str, str]) -> None:
    a, b = pair
    assume(a != b)
    assert not encode_str(b).startswith(encode_str(a))


@given(bytes_pairs())
def test_bytes_order_prefix_free_and_round_trip(pair: tuple[bytes, bytes]) -> None:
    a, b = pair
    ea, eb = encode_bytes(a), encode_bytes(b)
    assert cmp(ea, eb) == cmp(a, b)
    assert (a == b) or not eb.startswith(ea)
    assert decode_bytes(ea + eb) == (a, len(ea))
    assert decode_bytes(ea + eb, len(ea)) == (b, len(ea) + len(eb))


def test_str_escaping_layout() -> None:
    assert encode_str("") == b"\x00\x01"
    assert encode_str("ab") == b"ab\x00\x01"
    assert encode_str("a\x00b") == b"a\x00\xffb\x00\x01"
    assert encode_str("\x00") == b"\x00\xff\x00\x01"
    assert encode_str("é") == "é".encode() + b"\x00\x01"
    # A string sorts before its extensions, including one extended by NUL.
    assert encode_str("a") < encode_str("a\x00") < encode_str("a\x00\x00") < encode_str("a\x01")
    assert decode_str(b"a\x00\xff\x00\xffb\x00\x01") == ("a\x00\x00b", 8)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"abc",  # no terminator
        b"abc\x00",  # truncated escape
        b"a\x00\x02\x00\x01",  # invalid escape
        b"a\x00\xff",  # escaped NUL, then no terminator
        b"a\x00\xffb\x00",  # truncated after escaped NUL
        b"a\x00\xffb\x00\x07",  # invalid escape after escaped NUL
    ],
)
def test_decode_malformed_escapes_raise(data: bytes) -> None:
    with pytest.raises(KeyEncodingError):
        decode_str(data)
    with pytest.raises(KeyEncodingError):
        decode_bytes(data)


@pytest.mark.parametrize("data", [b"\xff\x00\x01", b"\xc3\x00\x01", b"\xed\xa0\x80\x00\x01"])
def test_decode_str_invalid_utf8_raises(data: bytes) -> None:
    with pytest.raises(KeyEncodingError, match="UTF-8"):
        decode_str(data)
    assert decode_bytes(data)[0] == data[:-2]


def test_encode_str_rejects_surrogates_and_non_str() -> None:
    with pytest.raises(KeyEncodingError, match="UTF-8"):
        encode_str("\ud800")
    with pytest.raises(KeyEncodingError):
        encode_str(b"abc")  # type: ignore[arg-type]
    with pytest.raises(KeyEncodingError):
        encode_bytes("abc")  # type: ignore[arg-type]


def test_decode_str_pos_out_of_range_raises() -> None:
    with pytest.raises(KeyEncodingError):
        decode_str(b"a\x00\x01", 4)
    with pytest.raises(KeyEncodingError):
        decode_str(b"a\x00\x01", -1)


# ---------------------------------------------------------------------- composite keys


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: "-".join(t.__name__ for t in s))
@given(data=st.data())
def test_composite_order_and_round_trip(schema: tuple[type, ...], data: st.DataObject) -> None:
    strategy = tuples_for(schema)
    a = data.draw(strategy, label="a")
    b = data.draw(st.one_of(strategy, st.just(a)), label="b")
    ea, eb = encode_key(*a), encode_key(*b)
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_key(ea, schema) == a
    assert decode_key(eb, schema) == b


@given(st.tuples(texts, st.binary(max_size=6), i64s))
def test_composite_with_bytes_round_trip(parts: tuple[str, bytes, int]) -> None:
    encoded = encode_key(*parts)
    assert encoded == encode_str(parts[0]) + encode_bytes(parts[1]) + encode_i64(parts[2])
    assert decode_key(encoded, (str, bytes, int)) == parts


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: "-".join(t.__name__ for t in s))
@given(raw=st.binary(max_size=24) | st.lists(st.sampled_from([0, 1, 0x61, 0xFF])).map(bytes))
def test_decode_key_on_arbitrary_bytes_is_canonical(schema: tuple[type, ...], raw: bytes) -> None:
    """Arbitrary bytes either decode to a tuple that re-encodes to them, or raise cleanly."""
    try:
        parts = decode_key(raw, schema)
    except KeyEncodingError:
        return
    assert encode_key(*parts) == raw


def test_encode_key_rejects_bool_and_other_types() -> None:
    for bad in (True, False, 1.5, None, bytearray(b"x"), ("a",)):
        with pytest.raises(KeyEncodingError):
            encode_key("k", bad)  # type: ignore[arg-type]


def test_encode_key_empty_and_layout() -> None:
    assert encode_key() == b""
    assert decode_key(b"", ()) == ()
    assert encode_key("a", 1, b"\x00") == encode_str("a") + encode_i64(1) + b"\x00\xff\x00\x01"


def test_decode_key_schema_mismatch_and_trailing_bytes_raise() -> None:
    key = encode_key("abc", 5)
    with pytest.raises(KeyEncodingError, match="trailing"):
        decode_key(key, (str,))
    with pytest.raises(KeyEncodingError, match="trailing"):
        decode_key(key + b"\x00", (str, int))
    with pytest.raises(KeyEncodingError):
        decode_key(key, (str, int, int))
    with pytest.raises(KeyEncodingError):
        decode_key(encode_key(5, "abc"), (str, int))
    for bad_type in (float, bool, list):
        with pytest.raises(KeyEncodingError, match="unsupported schema type"):
            decode_key(key, (str, bad_type))  # type: ignore[arg-type]


# ----------------------------------------------------------------- prefix upper bound


def test_prefix_upper_bound_edges() -> None:
    assert prefix_upper_bound(b"") is None
    assert prefix_upper_bound(b"\xff") is None
    assert prefix_upper_bound(b"\xff\xff") is None
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"a") == b"b"
    assert prefix_upper_bound(b"\x00") == b"\x01"
    assert prefix_upper_bound(b"a\xfe\xff\xff") == b"a\xff"
    assert prefix_upper_bound(b"\x01\xff\x00") == b"\x01\xff\x01"


@given(st.binary(max_size=6), st.binary(max_size=6), st.binary(max_size=6))
def test_prefix_upper_bound_is_tight(prefix: bytes, suffix: bytes, other: bytes) -> None:
    bound = prefix_upper_bound(prefix)
    if bound is None:
        assert prefix.strip(b"\xff") == b""
        return
    assert bound > prefix + suffix  # above every extension
    # ...and every string in [prefix, bound) starts with prefix.
    if prefix <= other < bound:
        assert other.startswith(prefix)


key_tuples = st.tuples(small_text, small_ints, small_ints)


@given(
    keys=st.sets(key_tuples, max_size=40),
    prefix=st.one_of(st.tuples(small_text), st.tuples(small_text, small_ints)),
    pick=st.integers(0, 1000),
    from_keys=st.booleans(),
)
def test_prefix_scan_is_exact(
    keys: set[tuple[str, int, int]],
    prefix: tuple[Any, ...],
    pick: int,
    from_keys: bool,
) -> None:
    if from_keys and keys:  # a prefix of an existing key, so the scan is non-empty
        key = sorted(keys)[pick % len(keys)]
        prefix = key[: len(prefix)]
    encoded = sorted(encode_key(*k) for k in keys)
    lo = encode_key(*prefix)
    hi = prefix_upper_bound(lo)
    start = bisect.bisect_left(encoded, lo)
    stop = len(encoded) if hi is None else bisect.bisect_left(encoded, hi)
    scanned = {decode_key(e, (str, int, int)) for e in encoded[start:stop]}
    expected = {k for k in keys if k[: len(prefix)] == prefix}
    assert scanned == expected
    # The sorted encodings are in tuple order, so a scan also yields tuple order.
    assert [decode_key(e, (str, int, int)) for e in encoded] == sorted(keys)


# --------------------------------------------------------------------------- ts_range

_tags = st.sampled_from([b"\x01", b"\x02", b"\xff"])
_sessions = st.sampled_from(["", "s", "s\x00", "s1", "t"])
_ts = st.one_of(st.integers(-5, 5), st.sampled_from([MIN_I64, MAX_I64]))


@given(
    scan_tag=_tags,
    scan_session=_sessions,
    rows=st.lists(st.tuples(_tags, _sessions, _ts, small_text), max_size=40),
    start=_ts,
    end=st.one_of(_ts, st.just(MAX_I64 + 1)),
)
def test_ts_range_is_exact(
    scan_tag: bytes,
    scan_session: str,
    rows: list[tuple[bytes, str, int, str]],
    start: int,
    end: int,
) -> None:
    scan_prefix = scan_tag + encode_str(scan_session)
    encoded = sorted(
        (tag + encode_str(session) + encode_i64(ts) + encode_str(tail), (tag, session, ts, tail))
        for tag, session, ts, tail in rows
    )
    lo, hi = ts_range(scan_prefix, start, end)
    assert lo <= hi
    got = sorted(row for enc, row in encoded if lo <= enc < hi)
    want = sorted(
        row
        for row in rows
        if (row[0], row[1]) == (scan_tag, scan_session) and start <= row[2] < end
    )
    assert got == want


def test_ts_range_bounds() -> None:
    tag = b"\x05"
    assert ts_range(tag, 10, 20) == (tag + encode_i64(10), tag + encode_i64(20))
    assert ts_range(tag, 10, MAX_I64 + 1) == (tag + encode_i64(10), b"\x06")
    assert ts_range(tag, MIN_I64, MAX_I64 + 1) == (tag + b"\x00" * 8, b"\x06")
    assert ts_range(tag, 20, 20) == (tag + encode_i64(20),) * 2
    assert ts_range(tag, 20, 10) == (tag + encode_i64(20),) * 2
    assert ts_range(b"", 0, 5) == (encode_i64(0), encode_i64(5))
    with pytest.raises(KeyEncodingError, match="no finite upper bound"):
        ts_range(b"", 0, MAX_I64 + 1)
    with pytest.raises(KeyEncodingError):
        ts_range(tag, MIN_I64 - 1, 0)
    with pytest.raises(KeyEncodingError):
        ts_range(tag, 0, MAX_I64 + 2)


# ------------------------------------------------------------------ window meta layouts


@given(
    tag=st.binary(min_size=0, max_size=3),
    a=st.tuples(_ts, texts),
    b=st.tuples(_ts, texts),
)
def test_time_first_and_key_first_keys(tag: bytes, a: tuple[int, str], b: tuple[int, str]) -> None:
    ta, tb = time_first_key(tag, *a), time_first_key(tag, *b)
    assert ta == tag + encode_i64(a[0]) + encode_str(a[1])
    assert cmp(ta, tb) == cmp(a, b)
    assert decode_time_first_key(ta, tag_len=len(tag)) == TimeFirstKey(tag, a[0], a[1])

    ka, kb = key_first_key(tag, a[1], a[0]), key_first_key(tag, b[1], b[0])
    assert ka == tag + encode_str(a[1]) + encode_i64(a[0])
    assert cmp(ka, kb) == cmp((a[1], a[0]), (b[1], b[0]))
    assert decode_key_first_key(ka, tag_len=len(tag)) == KeyFirstKey(tag, a[1], a[0])


def test_window_meta_decoders_reject_malformed() -> None:
    tfk = time_first_key(b"\x01", 7, "k")
    kfk = key_first_key(b"\x01", "k", 7)
    for decoder, key in ((decode_time_first_key, tfk), (decode_key_first_key, kfk)):
        assert decoder(key).tag == b"\x01"
        with pytest.raises(KeyEncodingError):
            decoder(key + b"\x00")
        with pytest.raises(KeyEncodingError):
            decoder(key[:-1])
        with pytest.raises(KeyEncodingError):
            decoder(key, tag_len=len(key) + 1)
        with pytest.raises(KeyEncodingError):
            decoder(key, tag_len=-1)


# ---------------------------------------------------------------------- message layouts

field_schemas = st.lists(st.sampled_from([int, str]), max_size=3)


def fields_for(schema: Sequence[type]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(*(st.one_of(small_ints, i64s) if t is int else small_text for t in schema))


offsets = st.one_of(st.integers(0, 5), st.integers(0, MAX_I64), st.just(MIN_I64))
prefixes = st.sampled_from([b"", b"\x01", encode_str("session"), encode_str("a\x00b")])


@given(prefix=prefixes, a=st.tuples(_ts, offsets), b=st.tuples(_ts, offsets))
def test_message_key_ts_offset(prefix: bytes, a: tuple[int, int], b: tuple[int, int]) -> None:
    ea = message_key_ts_offset(*a, prefix=prefix)
    eb = message_key_ts_offset(*b, prefix=prefix)
    assert ea == prefix + encode_i64(a[0]) + encode_i64(a[1])
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_message_key_ts_offset(ea, prefix_len=len(prefix)) == MessageKeyTsOffset(
        prefix, *a
    )


@given(prefix=prefixes, a=offsets, b=offsets)
def test_message_key_offset(prefix: bytes, a: int, b: int) -> None:
    ea, eb = message_key_offset(a, prefix=prefix), message_key_offset(b, prefix=prefix)
    assert ea == prefix + encode_i64(a)
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_message_key_offset(ea, prefix_len=len(prefix)) == MessageKeyOffset(prefix, a)


@given(data=st.data(), prefix=prefixes, schema=field_schemas)
def test_message_key_fields_ts_offset(
    data: st.DataObject, prefix: bytes, schema: list[type]
) -> None:
    rec = st.tuples(fields_for(schema), _ts, offsets)
    a = data.draw(rec, label="a")
    b = data.draw(st.one_of(rec, st.just(a), rec.map(lambda r: (a[0], *r[1:]))), label="b")
    ea = message_key_fields_ts_offset(*a, prefix=prefix)
    eb = message_key_fields_ts_offset(*b, prefix=prefix)
    assert ea.startswith(prefix + encode_fields(a[0]))
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_message_key_fields_ts_offset(
        ea, prefix_len=len(prefix)
    ) == MessageKeyFieldsTsOffset(prefix, *a)


@given(data=st.data(), prefix=prefixes, schema=field_schemas)
def test_message_key_ts_fields_offset(
    data: st.DataObject, prefix: bytes, schema: list[type]
) -> None:
    rec = st.tuples(_ts, fields_for(schema), offsets)
    a = data.draw(rec, label="a")
    b = data.draw(st.one_of(rec, st.just(a), rec.map(lambda r: (a[0], *r[1:]))), label="b")
    ea = message_key_ts_fields_offset(*a, prefix=prefix)
    eb = message_key_ts_fields_offset(*b, prefix=prefix)
    assert ea == prefix + encode_i64(a[0]) + encode_fields(a[1]) + encode_i64(a[2])
    assert cmp(ea, eb) == cmp(a, b)
    assert decode_message_key_ts_fields_offset(
        ea, prefix_len=len(prefix)
    ) == MessageKeyTsFieldsOffset(prefix, *a)


@given(
    rows=st.sets(st.tuples(st.tuples(small_text, small_ints), _ts, offsets), max_size=30),
    scan_fields=st.tuples(small_text, small_ints),
)
def test_equal_fields_prefix_scan_is_exact(
    rows: set[tuple[tuple[str, int], int, int]], scan_fields: tuple[str, int]
) -> None:
    prefix = encode_str("session")
    encoded = sorted(message_key_fields_ts_offset(*r, prefix=prefix) for r in rows)
    lo = prefix + encode_fields(scan_fields)
    hi = prefix_upper_bound(lo)
    assert hi is not None
    got = [
        decode_message_key_fields_ts_offset(e, prefix_len=len(prefix))
        for e in encoded
        if lo <= e < hi
    ]
    want = sorted(r for r in rows if r[0] == scan_fields)
    assert [(g.fields, g.ts, g.offset) for g in got] == want


def test_fields_mixed_types_int_sorts_before_str() -> None:
    assert encode_fields([MAX_I64]) < encode_fields([""])
    assert encode_fields(["a", MAX_I64]) < encode_fields(["a", ""])
    assert encode_fields([]) == b""
    assert decode_fields(encode_fields([1, "x\x00", -2])) == (1, "x\x00", -2)
    assert encode_fields([5]) == b"\x01" + encode_i64(5)
    assert encode_fields(["5"]) == b"\x02" + encode_str("5")


def test_fields_reject_bool_and_other_types() -> None:
    for bad in (True, 1.5, b"x", None):
        with pytest.raises(KeyEncodingError):
            encode_fields(["ok", bad])  # type: ignore[list-item]
        with pytest.raises(KeyEncodingError):
            message_key_fields_ts_offset(["ok", bad], 1, 2)  # type: ignore[list-item]


def test_message_decoders_reject_malformed() -> None:
    good = message_key_fields_ts_offset(["a", 1], 5, 6, prefix=b"P")
    assert decode_message_key_fields_ts_offset(good, prefix_len=1).fields == ("a", 1)
    with pytest.raises(KeyEncodingError, match="marker"):
        decode_message_key_fields_ts_offset(good, prefix_len=0)  # 'P' is not a marker
    with pytest.raises(KeyEncodingError):
        decode_message_key_fields_ts_offset(good[:-1], prefix_len=1)
    with pytest.raises(KeyEncodingError, match="too short"):
        decode_message_key_fields_ts_offset(b"\x00" * 15)
    with pytest.raises(KeyEncodingError, match="too short"):
        decode_message_key_ts_fields_offset(b"\x00" * 15)
    with pytest.raises(KeyEncodingError):
        decode_message_key_ts_fields_offset(b"\x00" * 8 + b"\x09" + b"\x00" * 8)
    with pytest.raises(KeyEncodingError):
        decode_message_key_ts_offset(b"\x00" * 17)
    with pytest.raises(KeyEncodingError):
        decode_message_key_ts_offset(b"\x00" * 15)
    with pytest.raises(KeyEncodingError):
        decode_message_key_offset(b"\x00" * 9)
    with pytest.raises(KeyEncodingError):
        decode_message_key_offset(b"\x00" * 8, prefix_len=9)
    # A str field whose terminator lies beyond the field span is rejected.
    with pytest.raises(KeyEncodingError):
        decode_fields(b"\x02ab\x00\x01", 0, 3)
    with pytest.raises(KeyEncodingError):
        decode_fields(b"\x01" + b"\x00" * 7)
    with pytest.raises(KeyEncodingError):
        decode_fields(b"\x01", 2)
