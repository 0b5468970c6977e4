"""State values larger than one changelog record, logged in parts.

A store value may grow past what Kafka takes in one record (a ``count_distinct`` or
``collect`` accumulator of a busy key, for a day): before, the changelog refused it,
the batch failed, and every restart failed on it again. A value longer than
:data:`PART_BYTES` is logged as its parts, then a *head* that names how many there
are:

* a part's key is :data:`PART_TAG`, the part's index (4 bytes) and the record's key
  (the column family's tag and the store key); its value the slice of the value;
* the head's key is :data:`HEAD_TAG` and the record's key; its value the number of
  parts (4 bytes) and the value's length (8 bytes).

The record's own key is not written for such a value; a restore puts the value together
at its head (from the parts read before it). Neither a head nor a part is superseded
by a later record of the store key, so the writer tombstones them itself: it keeps the
part count of every key whose head stands in the log under a local-only key of the
checkpoint family (committed with the store, rebuilt by a restore from the heads it
reads), and tombstones the head and parts of a key written again, after the record
that replaces them (a compaction that has removed the parts has then always removed
or replaced the head), and the parts beyond the new count of a key logged in parts
again.

A restore that reaches a head whose parts are not all there (a compaction removed
parts that a later write replaced) leaves the key until a later record of it, and
commits nothing past the head until then; a head of that kind that nothing follows is a
:class:`ChangelogError`, again at every try.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from stores.changelog.records import (
    CF_TAGS,
    LOCAL_KEY_PREFIX,
    ChangelogError,
    split_changelog_key,
)
from stores.rocks import ColumnFamily, StoreBatch, TaskStore

__all__ = [
    "HEAD_TAG",
    "PART_BYTES",
    "PART_TAG",
    "LogRecord",
    "Reassembler",
    "Restored",
    "in_parts",
    "logged_parts",
]

#: The longest value logged as one record; a longer one is logged in parts this long
#: (well within what Kafka's defaults take in one record: a producer's 1,000,000 bytes,
#: a topic's 1 MiB, key and headers included).
PART_BYTES = 512 * 1024
#: The first key byte of a part (no column family has it).
PART_TAG = b"\x10"
#: The first key byte of a head (no column family has it).
HEAD_TAG = b"\x11"
#: Local-only keys of the checkpoint family: the part count of each key logged in parts.
_LOCAL_PARTS = LOCAL_KEY_PREFIX + b"parts:"
_INDEX = struct.Struct(">I")
_HEAD = struct.Struct(">IQ")

#: A changelog record as the writer hands it to ``produce_batch``.
LogRecord = dict[str, bytes | None]


def logged_parts(store: TaskStore) -> dict[bytes, int]:
    """The part count of every record key whose head stands in the log."""
    end = _LOCAL_PARTS[:-1] + bytes([_LOCAL_PARTS[-1] + 1])
    return {
        k[len(_LOCAL_PARTS) :]: _INDEX.unpack(v)[0]
        for k, v in store.scan(ColumnFamily.CHECKPOINT, _LOCAL_PARTS, end)
    }


def _record_parts(batch: StoreBatch, key: bytes, parts: int) -> None:
    if parts:
        batch.put(ColumnFamily.CHECKPOINT, _LOCAL_PARTS + key, _INDEX.pack(parts))
    else:
        batch.delete(ColumnFamily.CHECKPOINT, _LOCAL_PARTS + key)


def _part_key(key: bytes, index: int) -> bytes:
    return PART_TAG + _INDEX.pack(index) + key


def in_parts(
    records: list[LogRecord],
    logged: dict[bytes, int],
    batch: StoreBatch,
    part_bytes: int = PART_BYTES,
) -> list[LogRecord]:
    """``records`` with every value longer than ``part_bytes`` logged in parts, and the
    heads and parts that a record replaces tombstoned (see module doc). ``logged`` is
    :func:`logged_parts` of the store; the changes to it go into ``batch``."""
    if not logged and all(r["value"] is None or len(r["value"]) <= part_bytes for r in records):
        return records  # the usual batch: nothing logged in parts
    out: list[LogRecord] = []
    for r in records:
        key, value = r["key"], r["value"]
        assert key is not None
        before = logged.get(key, 0)
        if value is None or len(value) <= part_bytes:
            out.append(r)
            if before:
                out += _tombstones(key, 0, before, head=True)
                logged.pop(key)
                _record_parts(batch, key, 0)
            continue
        count = -(-len(value) // part_bytes)
        view = memoryview(value)
        out += [
            {"key": _part_key(key, i), "value": bytes(view[i * part_bytes : (i + 1) * part_bytes])}
            for i in range(count)
        ]
        out.append({"key": HEAD_TAG + key, "value": _HEAD.pack(count, len(value))})
        out += _tombstones(key, count, before, head=False)
        if count != before:
            logged[key] = count
            _record_parts(batch, key, count)
    return out


def _tombstones(key: bytes, start: int, end: int, *, head: bool) -> Iterator[LogRecord]:
    if head:
        yield {"key": HEAD_TAG + key, "value": None}
    for i in range(start, end):
        yield {"key": _part_key(key, i), "value": None}


@dataclass(frozen=True, slots=True)
class Restored:
    """A changelog record read back: a store record, or a part or head of one."""

    cf: ColumnFamily
    key: bytes
    value: bytes | None
    #: a part's index; ``None`` for a store record or a head
    part: int | None = None
    head: bool = False

    @classmethod
    def read(cls, raw_key: bytes, value: bytes | None) -> Restored:
        """The record of changelog key ``raw_key``."""
        tag = raw_key[:1]
        if tag == PART_TAG:
            if len(raw_key) < 6:
                raise ChangelogError(f"not a changelog part key: {raw_key[:16]!r}")
            cf, key = split_changelog_key(raw_key[5:])
            return cls(cf, key, value, part=_INDEX.unpack(raw_key[1:5])[0])
        if tag == HEAD_TAG:
            cf, key = split_changelog_key(raw_key[1:])
            return cls(cf, key, value, head=True)
        cf, key = split_changelog_key(raw_key)
        return cls(cf, key, value)


@dataclass
class Reassembler:
    """Puts the values logged in parts together again, in a restore (see module doc)."""

    store: TaskStore
    #: the part count of every key whose head stands in the log (kept in the store)
    logged: dict[bytes, int] = field(default_factory=dict)
    #: the parts read and not yet taken by a head, per record key
    parts: dict[bytes, dict[int, bytes]] = field(default_factory=dict)
    #: keys whose head lacked parts, and no record of which came after it yet
    incomplete: set[tuple[ColumnFamily, bytes]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.logged = logged_parts(self.store)

    def apply(self, record: Restored, batch: StoreBatch) -> None:
        """Apply one committed record to ``batch``: a store record as it is, a part
        kept for its head, a head as the value of its parts."""
        key = CF_TAGS[record.cf] + record.key
        if record.part is not None:
            held = self.parts.setdefault(key, {})
            if record.value is None:
                held.pop(record.part, None)
            else:
                held[record.part] = record.value
            return
        self.incomplete.discard((record.cf, record.key))
        if not record.head:
            _put(batch, record.cf, record.key, record.value)
            return
        if record.value is None:  # the head's tombstone: the key has a record again
            if self.logged.pop(key, None) is not None:
                _record_parts(batch, key, 0)
            return
        count, length = _HEAD.unpack(record.value)
        held = self.parts.pop(key, {})
        value = b"".join(held.get(i, b"") for i in range(count))
        if len(value) != length or any(i not in held for i in range(count)):
            self.incomplete.add((record.cf, record.key))
        else:
            batch.put(record.cf, record.key, value)
        if self.logged.get(key) != count:
            self.logged[key] = count
            _record_parts(batch, key, count)

    def uncommitted(self, record: Restored, batch: StoreBatch) -> None:
        """A part or head beyond the last commit: its key's next write tombstones them."""
        if record.part is None and not record.head:
            return
        key = CF_TAGS[record.cf] + record.key
        count = record.part + 1 if record.part is not None else 0
        if record.head and record.value is not None:
            count = _HEAD.unpack(record.value)[0]
        if count > self.logged.get(key, 0):
            self.logged[key] = count
            _record_parts(batch, key, count)

    def check_complete(self, topic: str, partition: int) -> None:
        """Raise :class:`ChangelogError` for a head whose parts were missing and that no
        later record of its key replaced."""
        if self.incomplete:
            cf, key = sorted(self.incomplete)[0]
            raise ChangelogError(
                f"{topic}[{partition}]: the value of {cf.value} key {key[:32]!r} was logged "
                f"in parts, and {len(self.incomplete)} such value(s) lack parts"
            )


def _put(batch: StoreBatch, cf: ColumnFamily, key: bytes, value: bytes | None) -> None:
    if value is None:
        batch.delete(cf, key)
    else:
        batch.put(cf, key, value)
