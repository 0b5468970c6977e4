"""The join's stored state: the exact bytes of every keyspace (the on-disk format),
message keys and values through RocksDB and back, and corrupt values."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from stores.errors import StateCorruptError
from stores.keys import encode_fields
from stores.keyspace import EncodedKey, MessageLayout
from stores.rocks import StoreBatch, TaskStore
from window_operator.join import LEFT, RIGHT, message_position
from window_operator.join.state import (
    FRAMES,
    OUTER,
    SWEEP,
    FrameRecord,
    MessageCodec,
    OuterRecord,
    OuterValue,
)

A = EncodedKey(encode_fields(["a"]))
B = EncodedKey(encode_fields(["b"]))

#: One right message (key "a", ts 5, partition 1 offset 7, seq 3) per layout: the bytes
#: every store written so far holds.
ON_DISK = {
    MessageLayout.TS_OFFSET: (
        "5280000000000000058001000000000007",
        b'\x00\x00\x00\x04\x02a\x00\x01{"n":1}',
    ),
    MessageLayout.FIELDS_TS_OFFSET: ("520261000180000000000000058001000000000007", b'{"n":1}'),
    MessageLayout.TS_FIELDS_OFFSET: ("528000000000000005026100018001000000000007", b'{"n":1}'),
    MessageLayout.FIELDS_OFFSET: (
        "52026100018000000000000003",
        b'\x00\x00\x00\x00\x00\x00\x00\x05\x00\x01\x00\x00\x00\x00\x00\x07{"n":1}',
    ),
}


def one(value: int) -> np.ndarray:
    return np.array([value], dtype=np.int64)


@pytest.mark.parametrize("layout", list(MessageLayout))
def test_message_bytes_are_the_stored_format(layout: MessageLayout) -> None:
    codec = MessageCodec(layout, RIGHT)
    pos = message_position(1, 7)
    recs = np.array([b'{"n":1}'], dtype=object)
    keys, values = codec.encode([A], one(0), one(5), one(pos), one(3), recs)
    assert (keys[0].hex(), values[0]) == ON_DISK[layout]


def test_window_meta_bytes_are_the_stored_format() -> None:
    assert FRAMES[LEFT].key(10).hex() == "574c800000000000000a"
    assert OUTER[RIGHT].key(5, 7).hex() == "555280000000000000058000000000000007"
    assert SWEEP[LEFT].key(2, A).hex() == "584c800000000000000202610001"
    assert OuterRecord.encode(True, 5, 7, A, b"{}").hex() == (
        "010000000000000005000000000000000700000004026100017b7d"
    )


@pytest.mark.parametrize("layout", list(MessageLayout))
def test_messages_go_to_rocksdb_in_key_order_and_come_back(
    tmp_path: Path, layout: MessageLayout
) -> None:
    codec = MessageCodec(layout, LEFT)
    encoded = [B, A]  # key ids 0 and 1: the ids' order is not the bytes' order
    kids = np.array([0, 1, 0, 1], dtype=np.int64)
    ts = np.array([9, 9, 1, -4], dtype=np.int64)
    pos = np.array([message_position(p, o) for p, o in [(0, 1), (1, 2), (0, 3), (1, 0)]])
    seqs = np.array([1, 2, 3, 4], dtype=np.int64)
    recs = np.array([b"r0", b"r1", b"r2", b"r3"], dtype=object)
    keys, values = codec.encode(encoded, kids, ts, pos, seqs, recs)
    assert keys == sorted(keys)
    batch = StoreBatch()
    batch.put_many(codec.keyspace.cf, keys, values)
    with TaskStore(tmp_path / "db") as store:
        store.commit(batch)
        items = list(store.scan_range(codec.keyspace.all()))
    got = codec.decode([k for k, _ in items], [v for _, v in items])
    rows = sorted(zip(got.rec, got.fields, got.ts.tolist(), got.pos.tolist(), strict=True))
    assert rows == [(f"r{i}".encode(), encoded[kids[i]], int(ts[i]), int(pos[i])) for i in range(4)]
    assert (got.seq is not None) == (layout is MessageLayout.FIELDS_OFFSET)
    if got.seq is not None:
        assert sorted(got.seq.tolist()) == [1, 2, 3, 4]


def test_value_codecs_round_trip() -> None:
    assert FrameRecord.decode(FrameRecord.encode([3, -1, 9, 5, 8])) == [3, -1, 9, 5, 8]
    data = OuterRecord.encode(False, -5, 2**50, A, b'{"x":1}')
    assert OuterRecord.decode(data) == OuterValue(False, -5, 2**50, A, b'{"x":1}')


def test_corrupt_values_raise_state_corrupt() -> None:
    with pytest.raises(StateCorruptError, match="frame"):
        FrameRecord.decode(b"\x00" * 39)
    with pytest.raises(StateCorruptError, match="outer-join"):
        OuterRecord.decode(b"\x01\x00")
    with pytest.raises(StateCorruptError, match="holds 9 fields"):
        OuterRecord.decode(b"\x01" + struct.pack(">qqI", 1, 1, 9) + b"ab")
    ts_offset = MessageCodec(MessageLayout.TS_OFFSET, LEFT)
    key = ts_offset.keyspace.key(ts=1, offset=1)
    with pytest.raises(StateCorruptError, match="join message value"):
        ts_offset.decode([key], [b"\x00\x00\x00\x09ab"])
    rows = MessageCodec(MessageLayout.FIELDS_OFFSET, LEFT)
    with pytest.raises(StateCorruptError, match="shorter than its header"):
        rows.decode([rows.keyspace.key(fields=A, offset=1)], [b"\x00" * 15])
