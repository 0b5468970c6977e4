"""Reading committed messages back, per layout on real RocksDB: scans by key and time,
deep matches below the cache's horizon, and the matcher merging cache and store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from stores.keyspace import MessageLayout
from stores.rocks import StoreBatch, TaskStore
from window_operator.join import LEFT, RIGHT, JoinSpec
from window_operator.join.cache import SideCache
from window_operator.join.keys import JoinKeyTable
from window_operator.join.matching import TimeMatcher
from window_operator.join.reads import MessageReader
from window_operator.join.state import MessageCodec

INT = np.int64
TIME_LAYOUTS = [
    MessageLayout.TS_OFFSET,
    MessageLayout.TS_FIELDS_OFFSET,
    MessageLayout.FIELDS_TS_OFFSET,
]
#: Stored left messages: (key, ts, position); the record is b"<position>".
STORED = [("a", 1, 10), ("b", 2, 11), ("a", 5, 12), ("b", 9, 13), ("a", 9, 14)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TaskStore]:
    with TaskStore(tmp_path / "db") as s:
        yield s


def setup(store: TaskStore, layout: MessageLayout) -> tuple[MessageReader, JoinKeyTable]:
    keys = JoinKeyTable(("k",))
    kids = keys.ids_of([k for k, _, _ in STORED])
    codecs = (MessageCodec(layout, LEFT), MessageCodec(layout, RIGHT))
    ts = np.array([t for _, t, _ in STORED], dtype=INT)
    pos = np.array([p for _, _, p in STORED], dtype=INT)
    recs = np.array([str(p).encode() for p in pos.tolist()], dtype=object)
    k, v = codecs[LEFT].encode(keys.encoded, kids, ts, pos, np.zeros(0, dtype=INT), recs)
    batch = StoreBatch()
    batch.put_many(codecs[LEFT].keyspace.cf, k, v)
    store.commit(batch)
    return MessageReader(store, codecs, keys), keys


@pytest.mark.parametrize("layout", TIME_LAYOUTS)
def test_scans_select_by_key_and_inclusive_time(store: TaskStore, layout: MessageLayout) -> None:
    reader, keys = setup(store, layout)
    a = keys.id_of("a")
    everything = reader.scan(LEFT, None, 2, 9)
    assert sorted(everything.pos.tolist()) == [11, 12, 13, 14]
    only_a = reader.scan(LEFT, [a], 1, 5)
    assert sorted(zip(only_a.pos.tolist(), only_a.kid.tolist(), only_a.rec, strict=True)) == [
        (10, a, b"10"),
        (12, a, b"12"),
    ]
    assert len(reader.scan(RIGHT, None, 0, 99)) == 0


@pytest.mark.parametrize("layout", TIME_LAYOUTS)
def test_deep_matches_read_below_the_horizon_only(store: TaskStore, layout: MessageLayout) -> None:
    reader, keys = setup(store, layout)
    cache = SideCache()
    cache.horizon = 9  # messages at 9 and later are in memory, not read from the store
    cache.ts, cache.pos = np.array([5], dtype=INT), np.array([12], dtype=INT)  # cached below
    kids = keys.ids_of(["a", "b", "a"])
    lo, hi = np.array([0, 0, 6], dtype=INT), np.array([99, 99, 8], dtype=INT)
    deep = np.array([True, True, True])
    found = reader.deep_matches(LEFT, cache, kids, lo, hi, deep)
    got = sorted(zip(found.probe.tolist(), found.pos.tolist(), found.rec.tolist(), strict=True))
    assert got == [(0, 10, b"10"), (1, 11, b"11")]


@pytest.mark.parametrize("layout", TIME_LAYOUTS)
def test_the_matcher_joins_cache_and_store_in_partner_order(
    store: TaskStore, layout: MessageLayout
) -> None:
    # right messages join lefts 0..10 s before them: 0 <= right.ts - left.ts <= 10
    spec = JoinSpec(left="L", right="R", on=("k",), lo=0, hi=10, layout=layout)
    reader, keys = setup(store, layout)
    matcher = TimeMatcher(spec, keys, reader, slack_ms=0, max_rows=100)
    matcher.caches[LEFT].horizon = 6  # the store holds the lefts before 6 s
    kids = keys.ids_of(["a"])
    matcher.partners(RIGHT, kids, np.array([0], dtype=INT))  # fits the codec
    cached = np.array([b"cached"], dtype=object)
    matcher.insert(LEFT, kids, np.array([9], dtype=INT), np.array([14], dtype=INT), cached)
    found = matcher.partners(RIGHT, np.repeat(kids, 2), np.array([9, 30], dtype=INT))
    assert list(zip(found.probe.tolist(), found.ts.tolist(), found.rec.tolist(), strict=True)) == [
        (0, 1, b"10"),
        (0, 5, b"12"),
        (0, 9, b"cached"),
    ]
