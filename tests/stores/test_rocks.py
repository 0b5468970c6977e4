"""The task store: column families, atomic batches, bounded scans, range deletes."""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path

import pytest

from stores.keys import prefix_upper_bound
from stores.rocks import (
    BLOCK_CACHE_BYTES,
    INFO_LOGS_KEPT,
    WRITE_BUFFER_BYTES,
    ColumnFamily,
    StoreBatch,
    StoreClosedError,
    StoreLockedError,
    StoreReadOnlyError,
    TaskStore,
)


def test_batches_apply_in_order_across_column_families(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    b = StoreBatch()
    b.put(ColumnFamily.WINDOW_META, b"k", b"1")
    b.put_many(ColumnFamily.MESSAGES, [b"m1", b"m2"], [b"a", b"b"])
    b.put(ColumnFamily.WINDOW_META, b"k", b"2")  # later write wins
    b.delete(ColumnFamily.MESSAGES, b"m1")
    assert len(b) == 5
    store.commit(b)
    assert store.get(ColumnFamily.WINDOW_META, b"k") == b"2"
    assert store.multi_get(ColumnFamily.MESSAGES, [b"m1", b"m2", b"zz"]) == [None, b"b", None]
    assert store.get(ColumnFamily.CHECKPOINT, b"k") is None  # families are separate
    store.close()
    with pytest.raises(StoreClosedError):
        store.get(ColumnFamily.WINDOW_META, b"k")
    reopened = TaskStore(tmp_path)
    assert reopened.get(ColumnFamily.WINDOW_META, b"k") == b"2"
    reopened.close()


def test_a_reader_sees_what_its_open_owner_committed_and_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    owner = TaskStore(tmp_path / "t")
    first = StoreBatch()
    first.put(ColumnFamily.WINDOW_META, b"k", b"1")
    owner.commit(first)
    reader = TaskStore(tmp_path / "t", read_only=True)  # the owner holds the lock
    assert reader.get(ColumnFamily.WINDOW_META, b"k") == b"1"
    with pytest.raises(StoreReadOnlyError):
        reader.commit(first)
    later = StoreBatch()
    later.put(ColumnFamily.WINDOW_META, b"k", b"2")
    owner.commit(later)
    assert reader.get(ColumnFamily.WINDOW_META, b"k") == b"1"  # as of its opening
    reader.close()
    again = TaskStore(tmp_path / "t", read_only=True)
    assert [v for _, v in again.scan(ColumnFamily.WINDOW_META, b"")] == [b"2"]
    again.close()
    owner.close()
    assert not list((tmp_path / "tmp").iterdir())  # the readers' own files are gone
    with pytest.raises(FileNotFoundError):
        TaskStore(tmp_path / "none", read_only=True)
    assert not (tmp_path / "none").exists()


def test_scan_bounds_and_range_delete(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    b = StoreBatch()
    b.put_many(ColumnFamily.MESSAGES, [b"a%04d" % i for i in range(100)], [b"x"] * 100)
    b.put(ColumnFamily.MESSAGES, b"b", b"y")
    store.commit(b)
    assert [k for k, _ in store.scan(ColumnFamily.MESSAGES, b"a0010", b"a0013")] == [
        b"a0010", b"a0011", b"a0012"
    ]  # fmt: skip
    d = StoreBatch()
    d.delete_range(ColumnFamily.MESSAGES, b"a0000", b"a0090")
    store.commit(d)
    assert len(list(store.scan(ColumnFamily.MESSAGES, b""))) == 10 + 1
    store.close()


def test_a_temporary_upper_bound_does_not_cut_a_scan_short(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    b = StoreBatch()
    keys = [b"p%05d" % i for i in range(5000)]
    b.put_many(ColumnFamily.MESSAGES, keys, [b"v"] * len(keys))
    store.commit(b)
    it = store.scan(ColumnFamily.MESSAGES, b"p", prefix_upper_bound(b"p"))
    gc.collect()  # the bound passed above is no longer referenced by the caller
    assert sum(1 for _ in it) == len(keys)
    store.close()


def _fill(store: TaskStore, prefix: bytes, n: int) -> None:
    batch = StoreBatch()
    for i in range(n):
        batch.put(ColumnFamily.WINDOW_META, prefix + b"%08d" % i, bytes(200))
    store.commit(batch)


@pytest.mark.parametrize("background", [False, True])
def test_compacting_deleted_ranges_takes_their_data_off_the_disk(
    tmp_path: Path, background: bool
) -> None:
    store = TaskStore(tmp_path / "t")
    for chunk in range(4):
        _fill(store, b"a%d" % chunk, 20_000)
    store.close()  # the memtables go to files
    store = TaskStore(tmp_path / "t")
    full = store.size_on_disk()
    batch = StoreBatch()
    batch.delete_range(ColumnFamily.WINDOW_META, b"a", b"b")
    store.commit(batch)
    store.compact_deleted(background=background)
    _fill(store, b"c", 10)  # the store is usable while it compacts
    store.wait_for_compaction()
    assert store.get(ColumnFamily.WINDOW_META, b"a000000001") is None
    assert store.get(ColumnFamily.WINDOW_META, b"c00000001") == bytes(200)
    assert store.size_on_disk() < full / 2
    store.compact_deleted(background=background)  # nothing deleted since: nothing to do
    store.close()  # joins a compaction still running


def _options_file(path: Path) -> dict[str, dict[str, str]]:
    """The options RocksDB runs with, from the newest OPTIONS file it wrote: per section."""
    latest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in latest.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            current = sections.setdefault(line, {})
        elif "=" in line:
            name, _, value = line.partition("=")
            current[name] = value
    return sections


def test_every_column_family_runs_with_the_bounded_write_buffer(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    options = _options_file(tmp_path)
    for cf in ColumnFamily:
        family = options[f'[CFOptions "{cf.value}"]']
        assert family["write_buffer_size"] == str(WRITE_BUFFER_BYTES)
    # rows of 200 bytes, committed in batches, well past one write buffer
    for chunk in range(12):
        _fill(store, b"w%02d" % chunk, 20_000)
        memory = store.memory()
        assert memory.memtables <= 2 * WRITE_BUFFER_BYTES + (4 << 20)
        assert memory.block_cache <= BLOCK_CACHE_BYTES
    assert list(tmp_path.glob("*.sst"))  # full write buffers went to files
    store.close()


def test_reads_without_fill_cache_leave_the_block_cache_alone(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "t")
    for chunk in range(4):
        _fill(store, b"r%d" % chunk, 20_000)
    store.close()  # the memtables go to files: reads now go through the block cache
    store = TaskStore(tmp_path / "t")
    keys = [b"r1%08d" % i for i in range(0, 20_000, 50)]
    before = store.memory().block_cache
    assert len(list(store.scan(ColumnFamily.WINDOW_META, b"r0", b"r1", fill_cache=False))) == 20_000
    assert all(store.multi_get(ColumnFamily.WINDOW_META, keys, fill_cache=False))
    assert store.memory().block_cache == before
    assert len(list(store.scan(ColumnFamily.WINDOW_META, b"r0", b"r1"))) == 20_000
    assert store.memory().block_cache > before + (1 << 20)  # 4 MB of rows read
    filled = store.memory().block_cache
    assert all(store.multi_get(ColumnFamily.WINDOW_META, keys))
    assert store.memory().block_cache > filled
    store.close()


def test_a_store_opened_again_and_again_keeps_two_info_logs(tmp_path: Path) -> None:
    """A micro-batch job opens its stores at every batch and timer pass, and RocksDB
    starts a new info log each time: an idle job's store grew by the old ones (about
    60 KB a trigger interval) until RocksDB's default of 1,000 of them."""
    for _ in range(6):
        TaskStore(tmp_path).close()
    logs = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("LOG"))
    assert len(logs) == INFO_LOGS_KEPT and "LOG" in logs, logs


def test_a_store_open_in_this_process_is_refused_at_once_not_after_the_lock_wait(
    tmp_path: Path,
) -> None:
    """Before: the second open waited the whole lock wait (60 s), then blamed another
    process."""
    first = TaskStore(tmp_path / "t", lock_wait_s=30)
    started = time.monotonic()
    with pytest.raises(StoreLockedError, match="already open in this process"):
        TaskStore(tmp_path / ".." / tmp_path.name / "t", lock_wait_s=30)  # the same path
    assert time.monotonic() - started < 5
    first.close()
    again = TaskStore(tmp_path / "t")  # free once closed
    del again  # dropped unclosed: its lock goes with it
    TaskStore(tmp_path / "t", lock_wait_s=5).close()
