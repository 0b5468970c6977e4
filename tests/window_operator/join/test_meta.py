"""Window Meta Store metadata of a join on real RocksDB: per-frame counts and bounds,
and the per-prefix expiry index of key-first layouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stores.keys import encode_fields
from stores.keyspace import EncodedKey, MessageLayout
from stores.rocks import StoreBatch, TaskStore
from window_operator.join import LEFT, RIGHT
from window_operator.join.meta import SweepIndex, WindowFrames
from window_operator.join.state import MessageCodec

INT = np.int64


def test_frames_count_bounds_and_survive_a_restart(tmp_path: Path) -> None:
    frames = WindowFrames(frame_ms=10)
    #   frame 0: ts 1, 9     frame 10: ts 12     (positions 5, 3, 7)
    frames.note(LEFT, np.array([9, 12, 1], dtype=INT), np.array([5, 7, 3], dtype=INT))
    frames.note(LEFT, np.array([4], dtype=INT), np.array([1], dtype=INT))
    frames.note(RIGHT, np.array([0], dtype=INT), np.array([2], dtype=INT))
    assert frames.meta == {
        (LEFT, 0): [3, 1, 9, 1, 5],
        (LEFT, 10): [1, 12, 12, 7, 7],
        (RIGHT, 0): [1, 0, 0, 2, 2],
    }
    with TaskStore(tmp_path / "db") as store:
        batch = StoreBatch()
        frames.write(batch)
        frames.expire(LEFT, 10, batch)  # frame 0 ends at 10: gone, memory and store
        store.commit(batch)
        restored = WindowFrames(frame_ms=10)
        for side in (LEFT, RIGHT):
            restored.restore(side, store)
    assert (
        restored.meta
        == frames.meta
        == {
            (LEFT, 10): [1, 12, 12, 7, 7],
            (RIGHT, 0): [1, 0, 0, 2, 2],
        }
    )


def test_expiry_index_deletes_each_keys_expired_messages(tmp_path: Path) -> None:
    a, b = EncodedKey(encode_fields(["a"])), EncodedKey(encode_fields(["b"]))
    codec = MessageCodec(MessageLayout.FIELDS_TS_OFFSET, LEFT)
    encoded = [a, b]
    kids, ts = np.array([0, 1, 0], dtype=INT), np.array([5, 15, 25], dtype=INT)
    index = SweepIndex(sweep_ms=10)
    index.note(LEFT, kids, ts, encoded)
    assert index.buckets[LEFT] == {0: {a}, 1: {b}, 2: {a}}
    keys, values = codec.encode(encoded, kids, ts, ts, np.zeros(0, dtype=INT), np.array([b"x"] * 3))
    with TaskStore(tmp_path / "db") as store:
        batch = StoreBatch()
        batch.put_many(codec.keyspace.cf, keys, values)
        index.write(batch)
        store.commit(batch)
        batch = StoreBatch()
        index.expire(LEFT, 20, codec, batch)  # buckets 0 and 1 are over
        store.commit(batch)
        left = [codec.keyspace.parse(k) for k, _ in store.scan_range(codec.keyspace.all())]
        restored = SweepIndex(sweep_ms=10)
        restored.restore(LEFT, store)
    assert [(e.fields, e.ts) for e in left] == [(a, 25)]
    assert index.buckets[LEFT] == restored.buckets[LEFT] == {2: {a}}
