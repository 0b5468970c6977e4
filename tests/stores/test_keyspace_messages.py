"""The Samza message layouts and the integer / time-index keyspaces of ``stores.keyspace``:
keys equal the documented encodings of ``stores.keys``, sort as their parts, parse back,
and their ranges hold exactly the records they name."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keyref import (
    message_key_fields_ts_offset,
    message_key_offset,
    message_key_ts_fields_offset,
    message_key_ts_offset,
)

from stores.errors import StateCorruptError
from stores.keys import (
    MAX_I64,
    MIN_I64,
    FieldValue,
    encode_fields,
)
from stores.keyspace import (
    EncodedKey,
    IntKeyspace,
    KeyRange,
    MessageEntry,
    MessageKeyspace,
    MessageLayout,
    TimeIndexKeyspace,
)
from stores.rocks import ColumnFamily

CF = ColumnFamily.MESSAGES
I64 = st.integers(MIN_I64, MAX_I64)
FIELDS = st.lists(
    st.one_of(st.integers(-5, 5), st.sampled_from(["", "a", "a\x00", "b"])), min_size=2, max_size=2
)  # one arity per store: encoded fields are prefix-free among equal arities
ROWS = st.lists(st.tuples(FIELDS, st.integers(-(2**62), 2**62), I64), max_size=12)


def documented(layout: MessageLayout, tag: bytes, f: list[FieldValue], ts: int, o: int) -> bytes:
    """The key as ``stores.keys`` documents the layout."""
    if layout is MessageLayout.TS_OFFSET:
        return message_key_ts_offset(ts, o, prefix=tag)
    if layout is MessageLayout.FIELDS_TS_OFFSET:
        return message_key_fields_ts_offset(f, ts, o, prefix=tag)
    if layout is MessageLayout.TS_FIELDS_OFFSET:
        return message_key_ts_fields_offset(ts, f, o, prefix=tag)
    return message_key_offset(o, prefix=tag + encode_fields(f))


def inside(rng: KeyRange, key: bytes) -> bool:
    return rng.lo <= key and (rng.hi is None or key < rng.hi)


@pytest.mark.parametrize("layout", list(MessageLayout))
@given(rows=ROWS)
def test_keys_are_the_documented_layouts_and_sort_as_their_parts(
    layout: MessageLayout, rows: list[tuple[list[FieldValue], int, int]]
) -> None:
    ks = MessageKeyspace("m", CF, b"L", layout)
    fields = [EncodedKey(encode_fields(f)) for f, _, _ in rows]
    ts = np.array([t for _, t, _ in rows], dtype=np.int64)
    off = np.array([o for _, _, o in rows], dtype=np.int64)
    parts = {
        "fields": fields if layout.holds_fields else None,
        "ts": ts if layout.holds_ts else None,
        "offset": off,
    }
    keys = ks.keys(**parts)  # type: ignore[arg-type]
    assert keys == [documented(layout, b"L", f, t, o) for f, t, o in rows]
    assert keys == [
        ks.key(
            fields=fields[i] if layout.holds_fields else None,
            ts=int(ts[i]) if layout.holds_ts else None,
            offset=int(off[i]),
        )
        for i in range(len(rows))
    ]
    rank = np.unique(np.array(fields + [b""], dtype=object)[:-1], return_inverse=True)[1]
    order = ks.sort_order(field_rank=rank.astype(np.int64), ts=ts, offset=off).tolist()
    assert [keys[i] for i in order] == sorted(keys)
    cols = ks.parse_many(keys)
    assert cols.offset.tolist() == off.tolist()
    assert (cols.ts.tolist() if cols.ts is not None else None) == (
        ts.tolist() if layout.holds_ts else None
    )
    assert cols.fields == (fields if layout.holds_fields else None)
    for i, k in enumerate(keys):
        assert ks.parse(k) == MessageEntry(
            fields[i] if layout.holds_fields else None,
            int(ts[i]) if layout.holds_ts else None,
            int(off[i]),
        )


@given(rows=ROWS, lo=st.integers(-(2**62), 2**62), hi=st.integers(-(2**62), 2**62))
def test_time_ranges_hold_exactly_their_times(
    rows: list[tuple[list[FieldValue], int, int]], lo: int, hi: int
) -> None:
    for layout in (MessageLayout.TS_OFFSET, MessageLayout.TS_FIELDS_OFFSET):
        ks = MessageKeyspace("m", CF, b"R", layout)
        rng = ks.times(lo, hi)
        for f, t, o in rows:
            key = ks.key(fields=EncodedKey(encode_fields(f)), ts=t, offset=o)
            assert inside(rng, key) == (lo <= t < hi)


@given(rows=ROWS, want=FIELDS, lo=st.integers(-(2**62), 2**62), hi=st.integers(-(2**62), 2**62))
def test_key_ranges_hold_exactly_one_keys_records(
    rows: list[tuple[list[FieldValue], int, int]], want: list[FieldValue], lo: int, hi: int
) -> None:
    enc = EncodedKey(encode_fields(want))
    by_key = MessageKeyspace("m", CF, b"L", MessageLayout.FIELDS_OFFSET)
    by_key_time = MessageKeyspace("m", CF, b"L", MessageLayout.FIELDS_TS_OFFSET)
    for f, t, o in rows + [(want, lo, 0)]:
        e = EncodedKey(encode_fields(f))
        assert inside(by_key.of_key(enc), by_key.key(fields=e, offset=o)) == (f == want)
        key = by_key_time.key(fields=e, ts=t, offset=o)
        assert inside(by_key_time.key_times(enc, lo, hi), key) == (f == want and lo <= t < hi)
        assert inside(by_key_time.all(), key)


def test_ranges_a_layout_cannot_give_are_refused() -> None:
    with pytest.raises(ValueError, match="not ordered by time"):
        MessageKeyspace("m", CF, b"L", MessageLayout.FIELDS_TS_OFFSET).times(0, 1)
    with pytest.raises(ValueError, match="not ordered by key"):
        MessageKeyspace("m", CF, b"L", MessageLayout.TS_FIELDS_OFFSET).of_key(EncodedKey(b""))
    with pytest.raises(ValueError, match="need"):
        MessageKeyspace("m", CF, b"L", MessageLayout.TS_OFFSET).key(offset=1)
    with pytest.raises(ValueError, match="need the parts"):
        MessageKeyspace("m", CF, b"L", MessageLayout.FIELDS_OFFSET).sort_order(
            offset=np.zeros(1, dtype=np.int64)
        )


@pytest.mark.parametrize("layout", list(MessageLayout))
def test_keys_of_another_layout_or_keyspace_are_corrupt(layout: MessageLayout) -> None:
    ks = MessageKeyspace("join message", CF, b"L", layout)
    good = ks.key(fields=EncodedKey(encode_fields([1])), ts=5, offset=7)
    for bad in (b"L", b"R" + good[1:], good[: ks._min_len - 1]):
        with pytest.raises(StateCorruptError, match="join message"):
            ks.parse(bad)
        with pytest.raises(StateCorruptError):
            ks.parse_many([good, bad])
    if layout is MessageLayout.TS_OFFSET:
        with pytest.raises(StateCorruptError):
            ks.parse(good + b"\x00")


def test_int_keyspace_keys_parse_and_ranges() -> None:
    ks = IntKeyspace("outer row", ColumnFamily.WINDOW_META, b"UL", 2)
    key = ks.key(-3, 2**50)
    assert key == b"UL" + (2**63 - 3).to_bytes(8, "big") + (2**63 + 2**50).to_bytes(8, "big")
    assert ks.parse(key) == (-3, 2**50)
    assert inside(ks.before(-2), key) and not inside(ks.before(-3), key)
    assert inside(ks.all(), key) and not inside(ks.all(), b"UR" + key[2:])
    assert ks.before(MIN_I64).lo == ks.before(MIN_I64).hi  # nothing is before the minimum
    with pytest.raises(ValueError, match="2 integers"):
        ks.key(1)
    with pytest.raises(StateCorruptError, match="outer row"):
        ks.parse(key[:-1])


def test_time_index_keyspace_keeps_the_key_part_as_stored() -> None:
    ks = TimeIndexKeyspace("expiry index", ColumnFamily.WINDOW_META, b"XL")
    enc = EncodedKey(encode_fields(["a\x00b", 7]))
    key = ks.key(12, enc)
    assert ks.parse(key) == (12, enc)
    assert inside(ks.before(13), key) and not inside(ks.before(12), key)
    with pytest.raises(StateCorruptError, match="expiry index"):
        ks.parse(b"XL\x00")
