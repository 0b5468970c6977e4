"""Changelog record keys, the topic name and the local position of a store."""

from __future__ import annotations

import struct
from collections.abc import Mapping

from stores.errors import StoreError
from stores.rocks import ColumnFamily, StoreBatch, TaskStore

__all__ = [
    "CF_TAGS",
    "LOCAL_KEY_PREFIX",
    "LOCAL_POSITION_KEY",
    "ChangelogError",
    "changelog_key",
    "changelog_topic",
    "is_marker",
    "local_position",
    "set_local_position",
    "split_changelog_key",
]

#: One byte per column family in changelog keys (stable: they are on the wire).
CF_TAGS: Mapping[ColumnFamily, bytes] = {
    ColumnFamily.WINDOW_META: b"\x01",
    ColumnFamily.MESSAGES: b"\x02",
    ColumnFamily.CHECKPOINT: b"\x03",
}
_TAG_CF = {v[0]: k for k, v in CF_TAGS.items()}
#: Local-only key (checkpoint family): next changelog offset to read. Local-only keys start
#: with a zero byte: they describe this copy of the store and are never logged.
LOCAL_POSITION_KEY = b"\x00changelog-position"
#: The prefix of every local-only key of the checkpoint family.
LOCAL_KEY_PREFIX = b"\x00"
_I64 = struct.Struct(">q")


def changelog_topic(job: str, store: str = "state") -> str:
    """The changelog topic of a job's store: ``<job>-<store>-changelog``."""
    return f"{job}-{store}-changelog"


class ChangelogError(StoreError):
    """A changelog record could not be written or read (``kafka_codes``: the
    ``KafkaError`` codes of the records Kafka refused, when it said)."""

    def __init__(self, message: str, kafka_codes: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.kafka_codes = kafka_codes


def changelog_key(cf: ColumnFamily, key: bytes) -> bytes:
    """The changelog record key of a store key."""
    return CF_TAGS[cf] + key


def split_changelog_key(data: bytes) -> tuple[ColumnFamily, bytes]:
    """Inverse of :func:`changelog_key`."""
    try:
        return _TAG_CF[data[0]], data[1:]
    except (KeyError, IndexError):
        raise ChangelogError(f"not a changelog key: {data[:16]!r}") from None


def is_marker(cf: ColumnFamily, key: bytes) -> bool:
    """Whether a record is a commit marker (the logged checkpoint)."""
    return cf is ColumnFamily.CHECKPOINT and not key.startswith(b"\x00")


def local_position(store: TaskStore) -> int:
    """Next changelog offset the local store has not applied (0 for a fresh store)."""
    raw = store.get(ColumnFamily.CHECKPOINT, LOCAL_POSITION_KEY)
    return 0 if raw is None else int(_I64.unpack(raw)[0])


def set_local_position(batch: StoreBatch, position: int) -> None:
    """Record in ``batch`` that the store reflects the changelog up to ``position``."""
    batch.put(ColumnFamily.CHECKPOINT, LOCAL_POSITION_KEY, _I64.pack(position))
