"""The stored layout of sessions: keyspaces, record and message codecs, corrupt bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sessionkit import session_runtime

from stores.errors import StateCorruptError
from stores.keyspace import GroupKeyLayout, encode_key
from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.aggset import PendingMessage
from window_operator.session.state import (
    INDEX,
    PENDING,
    SESSIONS,
    RecordHeads,
    SessionRecordCodec,
    message_layout,
)

AGGS = session_runtime(
    aggregations=[
        {"name": "n", "op": "count"},
        {"name": "sum", "op": "sum", "field": "v"},
        {"name": "vals", "op": "collect", "field": "v"},
        {"name": "median", "op": "median", "field": "v"},
    ]
).aggregations
PER_PARTITION = GroupKeyLayout(per_partition=True)
PLAIN = GroupKeyLayout(per_partition=False)


def i64(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_session_keys_are_ordered_by_key_then_start_and_parse_back() -> None:
    a3 = PER_PARTITION.encode(encode_key("a"), 3)
    assert PER_PARTITION.parse(a3) == ("a", 3)
    assert PLAIN.parse(PLAIN.encode(encode_key("a\x00b"), 3)) == ("a\x00b", 0)
    keys = [SESSIONS.key(a3, t) for t in (-(2**62), -5, 0, 7)]
    assert keys == sorted(keys)
    assert SESSIONS.parse(keys[1]) == (a3, -5)
    assert SESSIONS.parse_many(keys)[1].tolist() == [-(2**62), -5, 0, 7]
    b0 = PER_PARTITION.encode(encode_key("b"), 0)
    table = [SESSIONS.prefix(a3), SESSIONS.prefix(b0)]
    assert SESSIONS.keys_of(table, i64(1, 0), i64(4, -5)) == [
        SESSIONS.key(b0, 4),
        SESSIONS.key(a3, -5),
    ]
    assert PENDING.parse(PENDING.key(b0, 4)) == (b0, 4)


def test_index_entries_are_ordered_by_bucket_and_point_at_their_session() -> None:
    a = encode_key("a")
    entries = [INDEX.key(b, a, s) for b, s in ((-1, 50), (2, 5), (2, 9), (3, 0))]
    assert entries == sorted(entries)
    assert INDEX.parse(entries[1]) == (2, a, 5)
    assert INDEX.keys_of([a], i64(0, 0), i64(2, 3), i64(9, 0)) == entries[2:]
    rng = INDEX.buckets(0, 3)
    assert [e for e in entries if rng.lo <= e < (rng.hi or b"")] == entries[1:3]
    since = INDEX.since(3)
    assert [e for e in entries if e >= since.lo] == entries[3:]


# Tuple sessions keep a key's sessions per partition; a query of the key reads every
# partition's, and no other key's (not even one the key is a prefix of).
def test_the_records_of_a_key_in_every_partition_are_one_range(tmp_path: Path) -> None:
    records = [("a", 0, 4), ("a", 1, 2), ("ab", 0, 1), ("a\x00", 0, 3), ("", 0, 9), ("b", 0, 0)]
    with TaskStore(tmp_path) as store:
        batch = StoreBatch()
        for key, part, start in records:
            enc = PER_PARTITION.encode(encode_key(key), part)
            batch.put(SESSIONS.cf, SESSIONS.key(enc, start), b"")
        store.commit(batch)
        found = [
            PER_PARTITION.parse(SESSIONS.parse(k).key)
            for k, _ in store.scan_range(SESSIONS.starting_with(encode_key("a")))
        ]
    assert found == [("a", 0), ("a", 1)]


def test_session_records_round_trip() -> None:
    codec = SessionRecordCodec(AGGS)
    acc = AGGS.accumulate({"v": np.array([1.0, 2.0, 5.0])}, i64(1, 2, 3), i64(0, 0, 1), 2)
    heads = RecordHeads(
        codec.flags(
            np.array([True, False]),
            np.array([True, False]),
            np.array([False, True]),
            np.array([True, False]),
            np.array([True, False]),
        ),
        i64(30, -7),
        i64(2, 0),
        i64(0, 0),
        i64(25, 0),
        acc,
    )
    objs = AGGS.create_objects()
    objs[0] = AGGS.objects[0][1].accumulate(objs[0], 5.0, Ordering(3, 0, 1))
    values = codec.encode(heads)
    values[0] += codec.encode_tail([(0, 10), (15, 25)], objs)
    values[1] += codec.encode_tail(None, AGGS.create_objects())
    got, tails = codec.decode(values)
    for name in ("flags", "end", "seq", "em_start", "em_end", "acc"):
        assert np.array_equal(getattr(got, name), getattr(heads, name)), name
    first = codec.decode_tail(int(got.flags[0]), tails[0])
    assert first.extra == [(0, 10), (15, 25)]
    assert first.objs is not None and first.objs[0] == objs[0]
    assert first.objs[1] == AGGS.create_objects()[1]  # full-state: kept as messages
    assert codec.decode_tail(int(got.flags[1]), tails[1]).extra is None
    assert (codec.end_of(values[0]), codec.pending_of(values[0])) == (30, True)
    assert (codec.end_of(values[1]), codec.pending_of(values[1])) == (-7, False)


@pytest.mark.parametrize("by_offsets", [False, True])
def test_messages_round_trip(by_offsets: bool) -> None:
    layout = message_layout(by_offsets)
    key = (PER_PARTITION if by_offsets else PLAIN).encode(encode_key("k"), 2)
    m = PendingMessage(0, ts=1_000, partition=2, offset=17, values=(4.5,))
    stored = layout.parse(key, 2, layout.key(key, m), layout.value(m))
    assert (stored.order, stored.values) == (Ordering(1_000, 2, 17), [4.5])
    span = layout.span(key, 0, 18 if by_offsets else 1_001)
    assert span.lo <= layout.key(key, m) < (span.hi or b"")


def test_corrupt_bytes_raise_state_corrupt_error() -> None:
    codec = SessionRecordCodec(AGGS)
    value = codec.encode(
        RecordHeads(i64(0), i64(1), i64(0), i64(0), i64(0), np.zeros((1, AGGS.width)))
    )[0]
    with pytest.raises(StateCorruptError, match="version"):
        codec.decode([b"\x07" + value[1:]])
    with pytest.raises(StateCorruptError, match="shorter"):
        codec.decode([value[:5]])
    with pytest.raises(StateCorruptError):
        codec.decode_tail(0, b"\x00\x00")  # a collect payload cut short
    with pytest.raises(StateCorruptError):
        codec.end_of(b"\x01")
    with pytest.raises(StateCorruptError):
        SESSIONS.parse(b"X" + bytes(12))
    with pytest.raises(StateCorruptError):
        PER_PARTITION.parse(encode_key("a"))  # no partition
    with pytest.raises(StateCorruptError):
        INDEX.parse(b"X\x00")
    layout = message_layout(False)
    key = encode_key("k")
    m = PendingMessage(0, 1, 0, 0, (1.0,))
    with pytest.raises(StateCorruptError):
        layout.parse(key, 0, layout.key(key, m), b"{not json")
