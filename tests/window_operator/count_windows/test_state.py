"""Count-window state: the ring and message keyspaces and their value codecs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from countkit import runtime

from stores.errors import StateCorruptError
from stores.keyspace import encode_key
from stores.rocks import StoreBatch, TaskStore
from window_operator.aggregations.base import Ordering
from window_operator.count_windows.state import MESSAGES, RING, FrameCodec, MessageCodec
from window_operator.timewindows.state import FRAMES

AGGS = [
    {"name": "n", "op": "count"},
    {"name": "s", "op": "sum", "field": "v"},
    {"name": "c", "op": "collect", "field": "v"},
    {"name": "m", "op": "median", "field": "v"},
]


def codec() -> FrameCodec:
    return FrameCodec(runtime({"type": "count", "size": 4, "step": 2}, AGGS).aggregations)


def test_frame_records_round_trip_without_full_state_payloads() -> None:
    fc = codec()
    aggs = fc.aggs
    objs = aggs.create_objects()
    for i, v in enumerate([2.0, 1.0]):
        order = Ordering(i, 0, i)
        objs = [op.accumulate(o, v, order) for o, (_, op) in zip(objs, aggs.objects, strict=True)]
    acc = aggs.identity_rows(1)
    (head,) = fc.encode_heads(
        np.array([7]), np.array([15]), np.array([2]), np.array([True]), np.array([False]), acc
    )
    data = fc.with_objects(head, objs)
    back = aggs.create_objects()
    rec = fc.decode(data, back)
    assert (rec.frame, rec.count, rec.seq, rec.early, rec.unfinal) == (7, 15, 2, True, False)
    assert fc.count_of(data) == 15
    assert rec.acc.tolist() == acc[0].tolist()
    # collect is stored in the record; the median (full-state) comes from the messages
    assert aggs.objects[0][1].finish(back[0]) == [2.0, 1.0]
    assert back[1] == aggs.create_objects()[1]


def test_frame_records_of_another_layout_are_corrupt() -> None:
    fc = codec()
    (head,) = fc.encode_heads(
        np.array([0]), np.array([1]), np.array([0]), np.array([False]), np.array([False]),
        fc.aggs.identity_rows(1),
    )  # fmt: skip
    with pytest.raises(StateCorruptError):
        fc.decode(b"\x09" + head[1:], None)
    with pytest.raises(StateCorruptError):
        fc.count_of(head[:5])
    with pytest.raises(StateCorruptError):
        fc.decode(head + b"\x00\x00\x00\x09{", fc.aggs.create_objects())


def test_messages_keep_infinities_nulls_and_json_values() -> None:
    nums = MessageCodec.decode(MessageCodec.encode(5, 1, 42, [math.inf, None, 1.5]))
    assert (nums.n, nums.partition, nums.offset) == (5, 1, 42)
    assert nums.values == [math.inf, None, 1.5]
    objs = MessageCodec.decode(MessageCodec.encode(0, 0, 0, ["x", {"a": 1}, 3]))
    assert objs.values == ["x", {"a": 1}, 3]
    with pytest.raises(StateCorruptError):
        MessageCodec.decode(b"\x00" * 24 + b"?")
    with pytest.raises(StateCorruptError):
        MessageCodec.decode(b"\x00" * 10)


def test_ring_keys_parse_back_and_scan_only_their_keyspace(tmp_path: Path) -> None:
    enc = [encode_key("a"), encode_key("b\x00c")]
    keys = RING.keys(enc, [1, 0])
    assert keys[0] == RING.key(enc[0], 1)
    assert [tuple(RING.parse(k)) for k in keys] == [("a", 1), ("b\x00c", 0)]
    assert tuple(MESSAGES.parse(MESSAGES.key(enc[0], 9))) == ("a", 9)
    with pytest.raises(StateCorruptError):
        RING.parse(MESSAGES.key(enc[0], 9))
    with pytest.raises(StateCorruptError):
        MESSAGES.parse(b"\x01garbage")
    with TaskStore(tmp_path) as store:
        batch = StoreBatch()
        batch.put_many(RING.cf, keys, [b"r1", b"r0"])
        batch.put(FRAMES.cf, FRAMES.key(0, enc[0]), b"time-window frame")
        batch.put(MESSAGES.cf, MESSAGES.key(enc[1], 3), b"m")
        store.commit(batch)
        assert [v for _, v in store.scan_range(RING.all())] == [b"r1", b"r0"]
        assert [v for _, v in store.scan_range(MESSAGES.all())] == [b"m"]
