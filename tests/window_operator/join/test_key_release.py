"""Join keys that come and go: memory and store stay bounded by the live messages (issue:
churn).

Timeline (retention 1 min, lateness 0): every batch brings ``N`` new join keys, one left
and one right message each, 100 s of event time after the previous batch, so after a
batch every message of the batch before is past retention::

    batch     0                  1                  ...
    left      k0-i at i ms       k1-i at 100 s + i  (i < N)
    right     k0-i at i + 5 s    k1-i at 105 s + i

``N`` is large enough for the message caches to drop what they evicted (in bulk, beyond
4096 messages). The key table is compacted once it holds twice the keys it held after
its last compaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from joinkit import join_runtime

from stores.keys import decode_fields
from window_operator.join import LEFT, RIGHT, JoinKind, JoinOperator, JoinResult, JoinRows
from window_operator.join.state import OUTER, SWEEP, OuterRecord

S = 1000
N = 4200

JOINS: dict[str, dict[str, Any]] = {
    "range, time-first": {"range": "10s", "store": "ts_offset"},
    "range, key-first": {"range": "10s", "store": "fields_ts_offset"},
    "left outer": {"range": "10s", "kind": "left", "store": "ts_fields_offset"},
    "rows": {"rows": 2},
}
#: Key-first stores and rows joins expire per sweep bucket (at least 10 minutes): their
#: expired messages linger for up to a bucket.
LINGERING = {"range, key-first", "rows"}


def rows_of(side: int, keys: list[str], ts: list[int]) -> JoinRows:
    recs = [orjson.dumps({"k": k, "ts": t}) for k, t in zip(keys, ts, strict=True)]
    return JoinRows.from_columns(keys, ts, recs, source=side)


def step(op: JoinOperator, keys: list[str], t0: int, *, right: bool = True) -> list[JoinResult]:
    """One micro-batch: a left message per key, then (``right``) a right one 5 s later."""
    op.add_batch(rows_of(LEFT, keys, [t0 + i for i in range(len(keys))]))
    if right:
        op.add_batch(rows_of(RIGHT, keys, [t0 + 5 * S + i for i in range(len(keys))]))
    results = op.get_result()
    op.flush()
    return results


def stored_keys(op: JoinOperator) -> set[str]:
    """The join keys of every stored message, outer-join row and expiry index entry."""
    found: set[str] = set()
    for side in (LEFT, RIGHT):
        codec = op.storage.codecs[side]
        items = list(op.store.scan_range(codec.keyspace.all()))
        msgs = codec.decode([k for k, _ in items], [v for _, v in items])
        found.update(str(decode_fields(f)[0]) for f in msgs.fields)
        for _, v in op.store.scan_range(OUTER[side].all()):
            found.add(str(decode_fields(OuterRecord.decode(v).fields)[0]))
        for k, _ in op.store.scan_range(SWEEP[side].all()):
            found.add(str(decode_fields(SWEEP[side].parse(k).key)[0]))
    return found


@pytest.mark.parametrize("join", list(JOINS))
def test_expired_keys_are_released_from_memory_and_store(
    open_join: Callable[..., JoinOperator], join: str
) -> None:
    op = open_join(join_runtime(JOINS[join], retention="1m"), cache_slack_ms=0, key_limit=0)
    for b in range(6):
        matched = step(op, [f"k{b}-{i}" for i in range(N)], b * 100 * S)
        assert sum(r.kind is JoinKind.MATCH for r in matched) == N
    # only the last batch's messages can still match: memory and store hold their keys
    # (the key table is compacted when it doubled since the last compaction)
    assert sum(len(c) for c in op.matcher.caches) <= 2 * N
    if join not in LINGERING:
        assert len(op.keys) <= 2 * 2 * N
        assert stored_keys(op) == {f"k5-{i}" for i in range(N)}
    # the watermark passes the retention (and sweep bucket) of every key
    step(op, ["later"], 1000 * S)
    step(op, ["latest"], 2000 * S)
    assert set(op.keys.names) <= {"later", "latest"}
    live = set(op.keys.ids.values())
    assert all(set(c.kid.tolist()) <= live for c in op.matcher.caches)
    assert all(set(state) <= live for state in op.rows.state)
    assert all(len(o.rows) == 0 for o in op.outer)
    assert stored_keys(op) <= {"later", "latest"}
    # a key that comes back joins only its new messages
    again = step(op, ["k0-0"], 3000 * S)
    pairs = [(r.left_ts, r.right_ts) for r in again if r.kind is JoinKind.MATCH]
    assert pairs == [(3000 * S, 3005 * S)]


def test_unmatched_rows_of_released_keys_are_emitted_once(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime(JOINS["left outer"], retention="1m"), key_limit=0)
    unmatched: list[Any] = []
    for b in range(4):
        results = step(op, [f"u{b}-{i}" for i in range(50)], b * 100 * S, right=False)
        unmatched += [r.left_ts for r in results if r.kind is JoinKind.LEFT_UNMATCHED]
    op.timeout(2**62)
    unmatched += [r.left_ts for r in op.get_result() if r.kind is JoinKind.LEFT_UNMATCHED]
    assert sorted(unmatched) == sorted(b * 100 * S + i for b in range(4) for i in range(50))
    assert np.unique(unmatched).size == len(unmatched)
