"""What a join writes at a flush: staged messages in key order, window frames, expiry by
range (time-first) or by key prefix (key-first), and the checkpoint fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stores.keyspace import MessageLayout
from stores.rocks import StoreBatch, TaskStore
from window_operator.join import LEFT, RIGHT, JoinSpec
from window_operator.join.keys import JoinKeyTable
from window_operator.join.state import MessageCodec
from window_operator.join.storage import JoinStorage

INT = np.int64


@pytest.mark.parametrize("layout", [MessageLayout.TS_OFFSET, MessageLayout.FIELDS_TS_OFFSET])
def test_staged_messages_are_written_expired_and_restored(
    tmp_path: Path, layout: MessageLayout
) -> None:
    spec = JoinSpec(left="L", right="R", on=("k",), hi=1000, layout=layout)
    codecs = (MessageCodec(layout, LEFT), MessageCodec(layout, RIGHT))
    keys = JoinKeyTable(("k",))
    kids = keys.ids_of(["a", "b", "a"])
    storage = JoinStorage(spec, codecs)
    # a sweep bucket is 30 min (half the default retention): a key-first store expires
    # whole buckets, so the first two messages sit in bucket 0 and the last in bucket 1
    ts = np.array([1_000, 2_000, 1_900_000], dtype=INT)
    storage.stage(LEFT, kids, ts, np.array([1, 2, 3], dtype=INT), [b"x", b"y", b"z"], None,
                  keys.encoded)  # fmt: skip
    assert storage.stored_max == [1_900_000, None]
    with TaskStore(tmp_path / "db") as store:
        batch = StoreBatch()
        storage.write_messages(batch, keys.encoded)
        storage.write_meta(batch)
        store.commit(batch)
        batch = StoreBatch()
        assert storage.expire(LEFT, 1_850_000, batch)
        assert not storage.expire(LEFT, 1_850_000, batch)  # nothing new to expire
        store.commit(batch)
        left = list(store.scan_range(codecs[LEFT].keyspace.all()))
        restored = JoinStorage(spec, codecs)
        restored.restore(store, storage.to_json())
    assert [codecs[LEFT].keyspace.parse(k).ts for k, _ in left] == [1_900_000]
    assert restored.expired == [1_850_000, storage.expired[RIGHT]]
    assert restored.stored_max == storage.stored_max
    assert list(restored.frames.meta) == list(storage.frames.meta) == [(LEFT, 1_900_000)]
