"""The changelog of churning keys stays bounded: every expired record gets a tombstone, so
the topic, compacted, holds exactly what the store holds (issue: churn).

Each operator runs six micro-batches of 30 new keys, 100 s of event time apart, then two
batches far later (after which everything before is past retention and every join sweep
bucket), logging each batch with the task's changelog writer to a real broker before
committing it, as a task does. Compacting the records read back (the latest per key, a
tombstone removing it) must give the store's contents, and only the last keys' state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from confluent_kafka import Producer
from helpers import runtime_for
from jobkit import create_topic, read_topic
from joinkit import join_runtime

from stores.changelog import LOCAL_POSITION_KEY, ChangelogWriter, split_changelog_key
from stores.rocks import ColumnFamily, TaskStore
from window_operator.events import EventBatch
from window_operator.join import LEFT, RIGHT, JoinRows

pytestmark = pytest.mark.kafka
S = 1000
AGGS = [{"name": "n", "op": "count"}, {"name": "median", "op": "median", "field": "v"}]
Contents = dict[tuple[ColumnFamily, bytes], bytes]


def open_operator(kind: str, path: Path) -> Any:
    store = TaskStore(path)
    if kind == "join":
        join = {"range": "10s", "kind": "left", "store": "fields_ts_offset"}
        return join_runtime(join, retention="1m").operator(store)
    window = (
        {"type": "tumbling", "size": "10s"}
        if kind == "time"
        else {
            "type": "session",
            "gap": "10s",
        }
    )
    rt = runtime_for(window=window, aggregations=AGGS, retention={"time": "1m"})
    return rt.operator(store)


def feed(op: Any, kind: str, keys: list[str], t0: int) -> None:
    ts = np.array([t0 + i for i in range(len(keys))], dtype=np.int64)
    if kind != "join":
        op.add_batch(EventBatch.from_columns(keys, ts, numeric={"v": np.ones(len(keys))}))
        return
    for side, shift in ((LEFT, 0), (RIGHT, 5 * S)):
        recs = [orjson.dumps({"k": k}) for k in keys]
        op.add_batch(JoinRows.from_columns(keys, ts + shift, recs, source=side))


def dump(store: TaskStore) -> Contents:
    return {
        (cf, k): v for cf in ColumnFamily for k, v in store.scan(cf, b"") if k != LOCAL_POSITION_KEY
    }


@pytest.fixture
def producer(kafka_bootstrap: str) -> Iterator[Producer]:
    p = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    yield p
    p.flush(10)


@pytest.mark.parametrize("kind", ["time", "session", "join"])
def test_the_compacted_changelog_holds_only_the_live_state(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    producer: Producer,
    kind: str,
) -> None:
    topic = unique_name("changelog")
    create_topic(kafka_bootstrap, topic, 1, **{"cleanup.policy": "compact"})
    writer = ChangelogWriter(producer, topic, partition=0)
    op = open_operator(kind, tmp_path / "task")
    steps = [([f"k{b}-{i}" for i in range(30)], b * 100 * S) for b in range(6)]
    steps += [(["later"], 2000 * S), (["last"], 3000 * S)]
    try:
        for keys, t0 in steps:
            feed(op, kind, keys, t0)
            op.timeout(t0)
            op.take_result_batches()
            batch = op.flush(commit=False)
            writer.wait(writer.write(batch, op.store, batch_number=op.batches, source_offsets=[]))
            op.store.commit(batch)
        compacted: Contents = {}
        for m in read_topic(kafka_bootstrap, topic):
            cf, key = split_changelog_key(m.key())
            if m.value() is None:
                compacted.pop((cf, key), None)
            else:
                compacted[(cf, key)] = m.value()
        stored = dump(op.store)
        assert compacted == stored
        assert not any(b"k0-" in k or b"k5-" in k for _, k in stored)
        assert len(stored) < 30
    finally:
        op.close()
