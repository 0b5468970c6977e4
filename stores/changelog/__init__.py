"""Changelog topics: every store mutation logged to Kafka, and restore by replay.

One compacted topic per store, one partition per task. A record's key is the column
family's one-byte tag followed by the store key; its value is the stored bytes, or
``None`` (a tombstone) for a delete. A range delete is logged as one tombstone per key
it removes. Headers carry the column family name; the commit marker also the batch
number and the task's input offsets. A value longer than 512 KiB is logged in parts
(:mod:`stores.changelog.parts`).

A batch's mutations are followed by its *commit marker* (the task checkpoint record,
always last). A restore applies records only up to the last marker it has seen; records
after it belong to a batch whose commit never completed and are reported back as the
*uncommitted tail*, which the task overwrites with the store's true values before it
logs anything new. Compaction keeps the latest marker (it has a fixed key), and never
reorders records, so "everything before the last marker" stays committed state.

With Kafka transactions (exactly-once) the restore reads ``read_committed``, so aborted
batches never reach a store; it also peeks at records beyond the last stable offset (a
transaction left open by a dead producer) and reports their keys as uncommitted too: a
broker that does not abort such a transaction when the producer's id is re-initialised
(a known defect of the local test broker) would otherwise commit them with the next one.

The local position (the changelog offset the local store reflects) lives under a
local-only key of the checkpoint column family: it is never logged.
"""

from stores.changelog.records import (
    CF_TAGS,
    LOCAL_KEY_PREFIX,
    LOCAL_POSITION_KEY,
    ChangelogError,
    changelog_key,
    changelog_topic,
    local_position,
    set_local_position,
    split_changelog_key,
)
from stores.changelog.restore import (
    RestoreProgress,
    RestoreResult,
    last_marker,
    restore_from_changelog,
)
from stores.changelog.writer import ChangelogDelivery, ChangelogWriter

__all__ = [
    "CF_TAGS",
    "LOCAL_KEY_PREFIX",
    "LOCAL_POSITION_KEY",
    "ChangelogDelivery",
    "ChangelogError",
    "ChangelogWriter",
    "RestoreProgress",
    "RestoreResult",
    "changelog_key",
    "changelog_topic",
    "last_marker",
    "local_position",
    "restore_from_changelog",
    "set_local_position",
    "split_changelog_key",
]
