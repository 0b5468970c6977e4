"""One RocksDB instance per task, through rocksdict: the only module that imports it.

A task's store has one column family per concern:

* ``window_meta``: the Window Meta Store (frames, window bookkeeping);
* ``messages``: the Message Store (full-state aggregations and joins);
* ``checkpoint``: the task checkpoint (offsets, watermark), written in the same
  WriteBatch as the state it describes, so state and offsets never disagree.

Writes of one step are collected in a :class:`StoreBatch` and applied atomically by
:meth:`TaskStore.commit`. The batch also keeps the ordered list of mutations so that a
changelog writer can log exactly what was applied.
"""

from __future__ import annotations

import enum
import gc
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
)

from stores.errors import StoreError, StoreLockedError
from stores.heap import release_free_heap
from stores.locks import claim_path, opened

__all__ = [
    "BulkPut",
    "ColumnFamily",
    "KeyRange",
    "Mutation",
    "MutationKind",
    "StoreBatch",
    "StoreClosedError",
    "StoreLockedError",
    "StoreMemory",
    "StoreReadOnlyError",
    "TaskStore",
]


class ColumnFamily(enum.StrEnum):
    """The column families of a task store."""

    WINDOW_META = "window_meta"
    MESSAGES = "messages"
    CHECKPOINT = "checkpoint"


class MutationKind(enum.IntEnum):
    """What a mutation does; values are stable (they appear in changelog headers)."""

    PUT = 1
    DELETE = 2
    DELETE_RANGE = 3


@dataclass(frozen=True, slots=True)
class Mutation:
    """One applied change. For ``DELETE_RANGE`` ``key`` is the start and ``value`` the end."""

    kind: MutationKind
    cf: ColumnFamily
    key: bytes
    value: bytes | None


class _Scan:
    """An iterator that keeps its read options and bound alive while it runs.

    RocksDB reads the upper bound through a pointer: if the bytes object were freed
    (a temporary passed by the caller) the scan would stop early, silently.
    """

    def __init__(self, items: Any, keep: tuple[Any, ...]) -> None:
        self._items = iter(items)
        self._keep = keep

    def __iter__(self) -> _Scan:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        item: tuple[bytes, bytes] = next(self._items)
        return item


@dataclass(frozen=True, slots=True)
class KeyRange:
    """The keys ``lo <= k < hi`` of one column family (``hi`` None: to the end)."""

    cf: ColumnFamily
    lo: bytes
    hi: bytes | None


@dataclass(frozen=True, slots=True)
class StoreMemory:
    """What RocksDB holds in memory for a store, in bytes (RocksDB's own estimates).

    ``memtables``: the write buffers of every column family, filling and flushing;
    ``table_readers``: index and filter blocks of the open files, held outside the block
    cache; ``block_cache``: the shared block cache (every store of the process).
    """

    memtables: int
    table_readers: int
    block_cache: int


class StoreReadOnlyError(StoreError):
    """A write to a store opened with ``read_only`` (see :class:`TaskStore`)."""


class StoreClosedError(StoreError):
    """The store was used after :meth:`TaskStore.close`."""


@dataclass(frozen=True, slots=True)
class BulkPut:
    """Many puts into one column family, kept as two parallel lists (the hot path)."""

    cf: ColumnFamily
    keys: list[bytes]
    values: list[bytes]


@dataclass
class StoreBatch:
    """The writes of one step, in order, applied atomically by :meth:`TaskStore.commit`."""

    entries: list[Mutation | BulkPut] = field(default_factory=list)

    def put(self, cf: ColumnFamily, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value``."""
        self.entries.append(Mutation(MutationKind.PUT, cf, key, value))

    def put_many(self, cf: ColumnFamily, keys: list[bytes], values: list[bytes]) -> None:
        """Set many keys at once (``keys[i]`` to ``values[i]``)."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        if keys:
            self.entries.append(BulkPut(cf, keys, values))

    def delete(self, cf: ColumnFamily, key: bytes) -> None:
        """Delete ``key``."""
        self.entries.append(Mutation(MutationKind.DELETE, cf, key, None))

    def delete_range(self, cf: ColumnFamily, start: bytes, end: bytes) -> None:
        """Delete every key in ``[start, end)``."""
        if start < end:
            self.entries.append(Mutation(MutationKind.DELETE_RANGE, cf, start, end))

    def delete_keys(self, keys: KeyRange) -> None:
        """Delete every key of a range (an unbounded range needs an upper bound here)."""
        if keys.hi is None:
            raise ValueError("a range delete needs an upper bound")
        self.delete_range(keys.cf, keys.lo, keys.hi)

    def __iter__(self) -> Iterator[Mutation]:
        """Every mutation in order, bulk puts expanded."""
        for e in self.entries:
            if isinstance(e, BulkPut):
                for k, v in zip(e.keys, e.values, strict=True):
                    yield Mutation(MutationKind.PUT, e.cf, k, v)
            else:
                yield e

    @property
    def mutations(self) -> list[Mutation]:
        """Every mutation in order, as a list."""
        return list(self)

    def __len__(self) -> int:
        return sum(len(e.keys) if isinstance(e, BulkPut) else 1 for e in self.entries)


#: One LRU block cache for every column family of every store in the process. RocksDB's
#: default gives each column family a cache of its own (8 MiB), so a task's memory grew
#: by up to 8 MiB per family as reads filled them (the session soak measured 32 MiB
#: arriving over its first 10M events), and by that again for every task of a worker.
BLOCK_CACHE_BYTES = 16 << 20
_BLOCK_CACHE: list[Cache] = []


def _table_options() -> BlockBasedOptions:
    if not _BLOCK_CACHE:
        _BLOCK_CACHE.append(Cache(BLOCK_CACHE_BYTES))
    table = BlockBasedOptions()
    table.set_block_cache(_BLOCK_CACHE[0])
    return table


#: Memtable bytes of a column family before RocksDB flushes it to a file. RocksDB's 64 MiB
#: default made the memtables (two per family at most: one filling, one flushing) the
#: largest part of a task's memory, swinging by up to 87 MiB from flush to flush in the
#: session soak; at 16 MiB a flush writes a smaller file more often.
WRITE_BUFFER_BYTES = 16 << 20


def _cf_options() -> Options:
    opts = Options(raw_mode=True)
    opts.set_block_based_table_factory(_table_options())
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    return opts


def _open(path: Path, lock_wait_s: float) -> Rdict:
    cfs = {cf.value: _cf_options() for cf in ColumnFamily}
    deadline = time.monotonic() + lock_wait_s
    while True:
        try:
            return Rdict(str(path), options=_options(), column_families=cfs)
        except Exception as exc:  # noqa: BLE001 - rocksdict raises a plain Exception
            if "lock" not in str(exc).lower():
                raise
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    f"the task store {path} stayed locked by another process for "
                    f"{lock_wait_s:.0f} s (another copy of the job running, or a worker of "
                    "a job that was killed)"
                ) from exc
        # A closed store of this process whose handles wait in a reference cycle still
        # holds the file lock: collect it. A worker of a killed job may still hold it for
        # a few seconds until it notices its parent is gone: wait for it.
        gc.collect()
        time.sleep(0.2)


def _open_secondary(path: Path, own_dir: Path) -> Rdict:
    """``path`` as a RocksDB secondary instance (no lock; ``own_dir`` takes its info log)."""
    opts = _cf_options()
    opts.set_max_open_files(-1)  # a secondary instance must keep every table file open
    cfs = {cf.value: _cf_options() for cf in ColumnFamily}
    return Rdict(
        str(path),
        options=opts,
        column_families=cfs,
        access_type=AccessType.secondary(str(own_dir)),
    )


#: Write-ahead log bytes kept before RocksDB flushes the column families holding the
#: oldest log. A log is deleted only once every column family with data in it has been
#: flushed, and the checkpoint family takes a few bytes per commit, so without a bound its
#: memtable (and with it every log since the store opened) would never be let go.
MAX_WAL_BYTES = 32 << 20


def _no_fill() -> ReadOptions:
    opts = ReadOptions()
    opts.fill_cache(False)  # type: ignore[call-arg]  # rocksdict's stub omits the argument
    return opts


#: RocksDB info logs kept per store: the current ``LOG`` and the one before it. RocksDB
#: starts a new one at every opening, and a micro-batch job opens its stores at every
#: batch and timer pass: with RocksDB's default (1,000 kept) an idle job's store grew by
#: about 60 KB a trigger interval, all of it old logs.
INFO_LOGS_KEPT = 2


def _options() -> Options:
    opts = _cf_options()
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_max_total_wal_size(MAX_WAL_BYTES)
    opts.set_keep_log_file_num(INFO_LOGS_KEPT)
    return opts


class TaskStore:
    """A task's RocksDB database with the window operator's column families."""

    def __init__(
        self, path: str | Path, *, lock_wait_s: float = 60.0, read_only: bool = False
    ) -> None:
        """Open (or create) the store at ``path``, waiting up to ``lock_wait_s`` for
        another process to let go of it.

        ``read_only``: only read the existing store, even while its owner has it open
        (a RocksDB secondary instance: no lock, every batch committed before it opened);
        :meth:`commit` raises :class:`StoreReadOnlyError`, and a ``path`` that holds no
        store raises :class:`FileNotFoundError`.
        """
        self.path = Path(path)
        self._reader_dir: Path | None = None
        if not read_only:
            self.path.mkdir(parents=True, exist_ok=True)
            self._db: Rdict | None = None
            claim_path(self)
            try:
                self._db = _open(self.path, lock_wait_s)
            finally:
                opened(self, self._db is not None)
        else:
            if not (self.path / "CURRENT").is_file():
                raise FileNotFoundError(f"no task store at {self.path}")
            self._reader_dir = Path(tempfile.mkdtemp(prefix="window-operator-reader-"))
            try:
                self._db = _open_secondary(self.path, self._reader_dir)
            except BaseException:
                shutil.rmtree(self._reader_dir, ignore_errors=True)
                raise
        self._cfs = {cf: self._db.get_column_family(cf.value) for cf in ColumnFamily}
        self._cfs_no_fill = {cf: self._db.get_column_family(cf.value) for cf in ColumnFamily}
        for family in self._cfs_no_fill.values():
            family.set_read_options(_no_fill())
        self._handles = {cf: self._db.get_column_family_handle(cf.value) for cf in ColumnFamily}
        #: per column family, the range covering every range delete since the last compaction
        self._deleted: dict[ColumnFamily, tuple[bytes, bytes]] = {}
        #: the compaction running in the background, if any (joined before the next and at close)
        self._compaction: threading.Thread | None = None

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._db is None

    def _require_open(self) -> Rdict:
        if self._db is None:
            raise StoreClosedError(f"task store {self.path} is closed")
        return self._db

    def get(self, cf: ColumnFamily, key: bytes) -> bytes | None:
        """The value of ``key``, or ``None`` when absent."""
        self._require_open()
        value: bytes | None = self._cfs[cf].get(key)
        return value

    def multi_get(
        self, cf: ColumnFamily, keys: Sequence[bytes], *, fill_cache: bool = True
    ) -> list[bytes | None]:
        """Values of many keys in one call (``None`` for absent keys).

        ``fill_cache=False`` for records about to be deleted: the blocks read for them
        then do not take the place of live ones in the block cache.
        """
        self._require_open()
        if not keys:
            return []
        # a list get takes its read options from the family object, not from read_opt
        family = self._cfs[cf] if fill_cache else self._cfs_no_fill[cf]
        values = family.get(list(keys))
        assert isinstance(values, list)
        return values

    def scan(
        self, cf: ColumnFamily, start: bytes, end: bytes | None = None, *, fill_cache: bool = True
    ) -> Iterator[tuple[bytes, bytes]]:
        """Iterate ``(key, value)`` in key order over ``[start, end)`` (``None``: to the end).

        ``fill_cache=False`` as in :meth:`multi_get`.
        """
        self._require_open()
        read_opts = ReadOptions() if fill_cache else _no_fill()
        if end is not None:
            read_opts.set_iterate_upper_bound(end)
        items = self._cfs[cf].items(from_key=start, read_opt=read_opts)
        return _Scan(items, (read_opts, end))

    def scan_range(
        self, keys: KeyRange, *, fill_cache: bool = True
    ) -> Iterator[tuple[bytes, bytes]]:
        """:meth:`scan` of a :class:`KeyRange`."""
        return self.scan(keys.cf, keys.lo, keys.hi, fill_cache=fill_cache)

    def commit(self, batch: StoreBatch) -> None:
        """Apply every mutation of ``batch`` atomically (one RocksDB WriteBatch)."""
        db = self._require_open()
        if not batch.entries:
            return
        if self._reader_dir is not None:
            raise StoreReadOnlyError(f"task store {self.path} is open for reading only")
        wb = WriteBatch(raw_mode=True)
        handles = self._handles
        for m in batch.entries:
            if isinstance(m, BulkPut):
                handle = handles[m.cf]
                put = wb.put
                for k, v in zip(m.keys, m.values, strict=True):
                    put(k, v, handle)
                continue
            handle = handles[m.cf]
            if m.kind is MutationKind.PUT:
                wb.put(m.key, m.value, handle)
            elif m.kind is MutationKind.DELETE:
                wb.delete(m.key, handle)
            else:
                assert m.value is not None
                wb.delete_range(m.key, m.value, handle)
                lo, hi = self._deleted.get(m.cf, (m.key, m.value))
                self._deleted[m.cf] = (min(lo, m.key), max(hi, m.value))
        db.write(wb)

    @property
    def deleted_uncompacted(self) -> bool:
        """Whether ranges were deleted since the last :meth:`compact_deleted`."""
        return bool(self._deleted)

    def compact_deleted(self, *, background: bool = False) -> None:
        """Compact the ranges deleted since the last call, so their data leaves the disk.

        A range delete only writes a tombstone; the deleted records stay in the files until
        a compaction reaches them, which for old, cold ranges may be never. With
        ``background`` the compaction runs in a thread of its own (joined by the next
        call and by :meth:`close`).
        """
        self._require_open()
        self.wait_for_compaction()
        ranges = [(self._cfs[cf], lo, hi) for cf, (lo, hi) in self._deleted.items()]
        self._deleted.clear()
        if not ranges:
            return

        def compact() -> None:
            for family, lo, hi in ranges:
                family.compact_range(lo, hi)
            release_free_heap()  # the flushes since the last call freed what they used

        if not background:
            compact()
            return
        # RocksDB releases the GIL while it compacts: the task goes on meanwhile
        self._compaction = threading.Thread(target=compact, name="store-compaction", daemon=True)
        self._compaction.start()

    def wait_for_compaction(self) -> None:
        """Wait for a background compaction (:meth:`compact_deleted`) to end."""
        if self._compaction is not None:
            self._compaction.join()
            self._compaction = None

    def memory(self) -> StoreMemory:
        """RocksDB's memory estimates for this store (see :class:`StoreMemory`)."""
        self._require_open()

        def total(prop: str) -> int:
            return sum(int(family.property_int_value(prop) or 0) for family in self._cfs.values())

        cache = self._cfs[ColumnFamily.CHECKPOINT].property_int_value("rocksdb.block-cache-usage")
        return StoreMemory(
            memtables=total("rocksdb.size-all-mem-tables"),
            table_readers=total("rocksdb.estimate-table-readers-mem"),
            block_cache=int(cache or 0),
        )

    def size_on_disk(self) -> int:
        """Bytes of the store's files (SST, WAL, manifest)."""
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())

    def close(self) -> None:
        """Flush and close the database; further use raises :class:`StoreClosedError`."""
        if self._db is None:
            return
        self.wait_for_compaction()
        db = self._db
        self._db = None
        db.close()  # the write-ahead log already holds every committed batch
        # rocksdict releases the file lock when every handle object is gone
        self._cfs.clear()
        self._cfs_no_fill.clear()
        self._handles.clear()
        del db
        if self._reader_dir is not None:
            shutil.rmtree(self._reader_dir, ignore_errors=True)

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
