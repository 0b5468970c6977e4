"""Which state task owns a record: a stable hash of the operator's key, mod the task count.

State is partitioned by key, not by where a record happened to arrive (Flink's key groups,
Kafka Streams' repartition topics, Spark's hash partitioning before a stateful operator).
The hash must be identical in every process, host and Python version, so it is CRC-32
(IEEE) of the key's bytes, never Python's ``hash()``:

* a grouping key (aggregations, sessions, count windows): its UTF-8 bytes;
* a join key: its store encoding (the equal fields, as in the Message Store keys);
* operators whose windows are defined per input partition (offset windows, tuple
  sessions): the partition number itself, ``partition mod N``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from window_operator.arrays import IntArray

__all__ = [
    "error_lane",
    "task_of_bytes",
    "task_of_keys",
    "task_of_partition",
    "task_of_partitions",
]


def task_of_bytes(keys: Sequence[bytes], n_tasks: int) -> IntArray:
    """The state task of each key given as bytes (CRC-32 mod ``n_tasks``)."""
    crc = zlib.crc32
    tasks = {k: crc(k) % n_tasks for k in dict.fromkeys(keys)}
    return np.fromiter(map(tasks.__getitem__, keys), dtype=np.int64, count=len(keys))


#: CRC-32 of the grouping keys routed so far in this process (a worker routes the same
#: keys chunk after chunk); emptied when it holds this many, so churning keys bound it.
_KEY_CRC_LIMIT = 1 << 20
_KEY_CRC: dict[str, int] = {}


def task_of_keys(keys: Sequence[str], n_tasks: int) -> IntArray:
    """The state task of each grouping key (CRC-32 of its UTF-8 bytes mod ``n_tasks``)."""
    known = _KEY_CRC
    try:
        crcs = np.fromiter(map(known.__getitem__, keys), dtype=np.int64, count=len(keys))
    except KeyError:
        if len(known) > _KEY_CRC_LIMIT:
            known.clear()
        crc = zlib.crc32
        for k in dict.fromkeys(keys):
            if k not in known:
                known[k] = crc(k.encode("utf-8", "surrogatepass"))
        crcs = np.fromiter(map(known.__getitem__, keys), dtype=np.int64, count=len(keys))
    out: IntArray = crcs % n_tasks
    return out


def task_of_partitions(partitions: IntArray, n_tasks: int) -> IntArray:
    """The state task of records whose operator is keyed by input partition."""
    out: IntArray = np.asarray(partitions, dtype=np.int64) % n_tasks
    return out


def task_of_partition(partition: int, n_tasks: int) -> int:
    """The state task that owns an input partition when state is keyed by partition."""
    return partition % n_tasks


def error_lane(partition: int, n_tasks: int) -> int:
    """The state task that sends the rejected records of an input partition (the owner
    of the partition when state is keyed by it)."""
    return task_of_partition(partition, n_tasks)
