"""The interned session keys of a task: the grouping key, per partition for tuple sessions."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from stores.keyspace import EncodedKey, GroupKeyLayout
from window_operator.arrays import IntArray
from window_operator.keytable import KeyTable
from window_operator.session.state import SESSIONS

__all__ = ["SessionKeys", "order_code"]


def order_code(encoded: bytes) -> int:
    """A stable 62-bit code of a session key, so emission order survives a restore."""
    return (zlib.crc32(encoded) << 30) ^ zlib.adler32(encoded)


class SessionKeys:
    """Interns session keys: the grouping key, plus the partition for tuple sessions.

    ``enc[kid]`` is the key part of its store keys (:class:`GroupKeyLayout`),
    ``prefix[kid]`` its session record prefix, ``name[kid]`` the grouping key,
    ``part_arr[kid]`` the partition (0 for time sessions) and ``code[kid]`` a stable
    hash used to order emissions. :meth:`compact` forgets the keys nothing refers to any
    more (ids are then renumbered).
    """

    def __init__(self, per_partition: bool) -> None:
        self.per_partition = per_partition
        self.layout = GroupKeyLayout(per_partition)
        self.table: KeyTable[str] = KeyTable()
        self._pairs: dict[tuple[int, int], int] = {}
        self._by_enc: dict[bytes, int] = {}
        self.name: list[str] = [] if per_partition else self.table.names
        self.enc: list[EncodedKey] = [] if per_partition else self.table.encoded
        self.prefix: list[bytes] = []
        self.code: IntArray = np.zeros(0, dtype=np.int64)
        self.part_arr: IntArray = np.zeros(0, dtype=np.int64)
        self._parts: list[int] = []
        #: per-partition keys: the grouping key id of each session key
        self._skids: list[int] = []

    def __len__(self) -> int:
        return len(self.enc)

    def ids(self, keys: Sequence[str], parts: IntArray) -> IntArray:
        """Session key ids of many events (new ones get the next ids, in first-seen order)."""
        # One dict pass over the batch; only misses go through KeyTable.id_of (the
        # same ids as KeyTable.ids_of, which needs three passes).
        found: list[int | None] = list(map(self.table.ids.get, keys))
        if None in found:
            id_of = self.table.id_of
            for i in [i for i, v in enumerate(found) if v is None]:
                found[i] = id_of(keys[i])
        skid = np.array(found, dtype=np.int64)
        if not self.per_partition:
            out = skid
        else:
            pairs = np.stack([skid, parts.astype(np.int64)])
            upairs, inv = np.unique(pairs, axis=1, return_inverse=True)
            ids = np.fromiter(
                (
                    self._pair_id(k, p)
                    for k, p in zip(upairs[0].tolist(), upairs[1].tolist(), strict=True)
                ),
                dtype=np.int64,
                count=upairs.shape[1],
            )
            out = ids[inv.reshape(-1)]
        self.sync()
        return out

    def id_of(self, key: str, part: int) -> int:
        """The id of one session key (assigned if new)."""
        skid = self.table.ids.get(key)
        if skid is None:
            skid = self.table.id_of(key)
        kid = self._pair_id(skid, part) if self.per_partition else skid
        if kid >= len(self.prefix):
            self.sync()
        return kid

    def ids_of_encoded(self, encoded: Sequence[EncodedKey]) -> IntArray:
        """The ids of session keys read from the store (assigned if new)."""
        out = np.fromiter(map(self._id_of_encoded, encoded), dtype=np.int64, count=len(encoded))
        self.sync()
        return out

    def _id_of_encoded(self, encoded: EncodedKey) -> int:
        kid = self._by_enc.get(encoded)
        if kid is not None:
            return kid
        key, part = self.layout.parse(encoded)
        skid = self.table.id_of(key)
        return self._pair_id(skid, part) if self.per_partition else skid

    def _pair_id(self, skid: int, part: int) -> int:
        kid = self._pairs.get((skid, part))
        if kid is None:
            kid = len(self.enc)
            self._pairs[(skid, part)] = kid
            self.name.append(self.table.names[skid])
            self.enc.append(self.layout.encode(self.table.encoded[skid], part))
            self._parts.append(part)
            self._skids.append(skid)
        return kid

    def compact(self, live: IntArray) -> IntArray:
        """Keep only the ids in ``live`` (sorted, distinct); return old id -> new id (-1: gone)."""
        self.sync()
        remap = np.full(len(self.enc), -1, dtype=np.int64)
        remap[live] = np.arange(len(live), dtype=np.int64)
        keep = live.tolist()
        if self.per_partition:
            skids = [self._skids[k] for k in keep]
            used = np.unique(np.asarray(skids, dtype=np.int64))
            key_remap = self.table.compact(used)
            self._skids = key_remap[np.asarray(skids, dtype=np.int64)].tolist()
            self._parts = [self._parts[k] for k in keep]
            self.name = [self.name[k] for k in keep]
            self.enc = [self.enc[k] for k in keep]
            pairs = zip(self._skids, self._parts, strict=True)
            self._pairs = dict(zip(pairs, range(len(keep)), strict=True))
        else:
            self.table.compact(live)
            # the table rebuilt its lists: the columns shared with it follow
            self.name = self.table.names
            self.enc = self.table.encoded
        self.prefix = [self.prefix[k] for k in keep]
        self.code = self.code[live]
        self.part_arr = self.part_arr[live]
        self._by_enc = dict(zip(self.enc, range(len(keep)), strict=True))
        return remap

    def sync(self) -> None:
        """Derive the per-key columns of the keys interned since the last call (in bulk)."""
        have, n = len(self.prefix), len(self.enc)
        if n == have:
            return
        new = self.enc[have:n]
        self.prefix.extend(SESSIONS.prefix(e) for e in new)
        self._by_enc.update(zip(new, range(have, n), strict=True))
        codes = np.fromiter((order_code(e) for e in new), dtype=np.int64, count=n - have)
        self.code = np.concatenate([self.code, codes])
        parts = self._parts[have:n] if self.per_partition else [0] * (n - have)
        self.part_arr = np.concatenate([self.part_arr, np.asarray(parts, dtype=np.int64)])
