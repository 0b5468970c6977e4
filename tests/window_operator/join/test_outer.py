"""Outer-join state on real RocksDB: unmatched rows, their deadlines, retractions,
expiry, and restore."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stores.keys import encode_fields
from stores.keyspace import EncodedKey
from stores.rocks import StoreBatch, TaskStore
from window_operator.join import LEFT, JoinSpec
from window_operator.join.keys import JoinKeyTable
from window_operator.join.outer import OuterRows

SPEC = JoinSpec(left="L", right="R", on=("k",), kind="left", lo=0, hi=10)


def register(rows: OuterRows, ts: list[int], unmatched: list[bool]) -> None:
    n = len(ts)
    rows.register(
        np.zeros(n, dtype=np.int64),
        np.array(ts, dtype=np.int64),
        np.arange(n, dtype=np.int64) + 100,  # positions 100, 101, ...
        np.array([f"r{t}".encode() for t in ts], dtype=object),
        np.array(unmatched),
    )


def test_rows_are_due_once_past_their_deadline_and_retracted_when_matched() -> None:
    rows = OuterRows(LEFT, SPEC)
    register(rows, [0, 5, 20], [True, True, False])
    assert [r.ts for r in rows.due(10)] == []  # deadline ts + hi: 10 is not passed
    assert [r.ts for r in rows.due(11)] == [0]
    assert rows.due(11) == []  # never twice
    retracted = rows.matched(np.array([100, 101, 101], dtype=np.int64))
    assert [r.ts for r in retracted] == [0]  # emitted, then matched: retract it
    assert rows.rows == {} and rows.due(100) == []  # matched rows are never due


def test_rows_persist_expire_and_restore(tmp_path: Path) -> None:
    keys = JoinKeyTable(("k",))
    kid = keys.id_of("a")
    encoded: list[EncodedKey] = keys.encoded
    rows = OuterRows(LEFT, SPEC)
    register(rows, [0, 5, 30], [True, True, True])
    rows.due(12)  # row 0 emitted unmatched
    with TaskStore(tmp_path / "db") as store:
        batch = StoreBatch()
        rows.write(batch, encoded)
        rows.matched(np.array([101], dtype=np.int64))  # row 5 matched: deleted next write
        rows.write(batch, encoded)
        store.commit(batch)
        restored = OuterRows(LEFT, SPEC)
        restored.restore(store, JoinKeyTable(("k",)))
        assert {p: (r.ts, r.emitted, r.rec) for p, r in restored.rows.items()} == {
            100: (0, True, b"r0"),
            102: (30, False, b"r30"),
        }
        assert encode_fields(["a"]) == encoded[kid]
        assert [r.ts for r in restored.due(41)] == [30]  # only the row not yet emitted
        batch = StoreBatch()
        restored.expire(10, batch)
        store.commit(batch)
        again = OuterRows(LEFT, SPEC)
        again.restore(store, JoinKeyTable(("k",)))
    assert list(again.rows) == [102] and 100 not in restored.rows
