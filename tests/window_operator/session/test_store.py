"""What the store part writes, deletes and reads back (real RocksDB)."""

from __future__ import annotations

from pathlib import Path

from sessionkit import S, ev, session_runtime, tuple_runtime

from stores.rocks import ColumnFamily
from window_operator.results import ErrorCode


def test_expired_sessions_and_messages_are_deleted(tmp_path: Path) -> None:
    runtime = session_runtime(gap="5s", retention={"time": "30s"})
    agg = runtime.open_task(tmp_path)
    times = range(0, 300, 7)  # one session per event (7 s apart, gap 5 s)
    for t in times:
        agg.add_message(ev(f"k{t % 3}", t))
        agg.flush()
    starts = sorted(
        w.window_start // S for k in ("k0", "k1", "k2") for w in agg.get_windows(k, 0, 10**9)
    )
    # watermark 294: sessions ending after 294 - 30 are retained; ones ending two index
    # buckets (of 5 s, the gap) before that are gone
    assert [t for t in times if t + 5 > 294 - 30] == [t for t in starts if t + 5 > 294 - 30]
    assert min(starts) + 5 > 294 - 30 - 2 * 5
    meta = list(agg.store.scan(ColumnFamily.WINDOW_META, b"S", b"T"))
    assert len(meta) == len(starts)
    messages = list(agg.store.scan(ColumnFamily.MESSAGES, b"", None))
    assert len(messages) == len(starts)  # median keeps one message per event
    agg.close()


def test_merges_never_move_messages_or_rewrite_the_earliest_record(tmp_path: Path) -> None:
    runtime = session_runtime()
    agg = runtime.open_task(tmp_path)
    agg.add_batch([ev("a", 0), ev("a", 15), ev("a", 30)])
    agg.flush()
    messages = list(agg.store.scan(ColumnFamily.MESSAGES, b"", None))
    agg.add_message(ev("a", 8))  # merges [0], [15] into [0, 25]
    agg.add_message(ev("a", 22))  # and [30] in: one session [0, 40]
    batch = agg.flush()
    after = [m for m in agg.store.scan(ColumnFamily.MESSAGES, b"", None) if m not in messages]
    assert sorted(messages + after) == sorted(agg.store.scan(ColumnFamily.MESSAGES, b"", None))
    assert len(after) == 2  # only the two new events were written
    puts = [m.key for m in batch if m.cf is ColumnFamily.WINDOW_META and m.value is not None]
    session_puts = [k for k in puts if k[:1] == b"S"]
    assert len(session_puts) == 1  # the survivor, under its unchanged key
    (w,) = agg.get_windows("a", 0, 10**6)
    assert (w.window_start, w.window_end, w.values["n"], w.values["median"]) == (0, 40 * S, 5, 15.0)
    agg.close()


def test_tuple_sessions_restore_and_rejected_records_count(tmp_path: Path) -> None:
    runtime = tuple_runtime(3)
    agg = runtime.open_task(tmp_path)
    agg.add_message({"k": "a", "ts": 0, "v": 1}, offset=10)
    agg.add_message({"k": "a", "ts": 0, "v": 2}, offset=12)
    agg.close()
    agg = runtime.open_task(tmp_path)
    agg.add_message({"k": "a", "v": 2}, offset=13)  # rejected (no timestamp): still a message
    assert [e.code for e in agg.get_errors()] == [ErrorCode.MISSING_TIMESTAMP]
    agg.add_message({"k": "b", "ts": 0, "v": 2}, offset=14)
    assert agg.get_result() == []
    agg.mark_consumed(0, 15)  # offset 15 = 12 + 3: a's session has ended
    (r,) = agg.get_result()
    assert (r.key, r.window_start, r.window_end, r.values["n"], r.values["median"]) == (
        "a", 10, 13, 2, 1.5
    )  # fmt: skip
    agg.flush()
    assert agg.get_windows("a", 0, 100) == []  # ended sessions are deleted
    assert [w.window_start for w in agg.get_windows("b", 0, 100)] == [14]
    agg.close()


# STORE_UNIT
