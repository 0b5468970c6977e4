"""Interned grouping keys: small integer ids with each key's store encoding."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

import numpy as np

from stores.keyspace import EncodedKey, encode_key
from window_operator.arrays import IntArray

__all__ = ["DEFAULT_KEY_SLACK", "KeyTable"]

K = TypeVar("K", bound=Hashable)

#: Keys an operator keeps interned beyond twice the live ones before it compacts its key
#: table (the compaction's cost is then amortized over the keys it releases).
DEFAULT_KEY_SLACK = 4096


class KeyTable(Generic[K]):
    """Interns keys as ids ``0..n-1`` (first-seen order) and caches their store encoding.

    ``names[kid]`` is the key, ``encoded[kid]`` its store encoding. :meth:`compact`
    forgets keys nothing refers to any more (ids are then renumbered).
    """

    def __init__(self, encode: Callable[[K], bytes] | None = None) -> None:
        self._encode: Callable[[K], bytes] = encode or encode_key  # type: ignore[assignment]
        self.ids: dict[K, int] = {}
        self.names: list[K] = []
        self.encoded: list[EncodedKey] = []

    def __len__(self) -> int:
        return len(self.names)

    def id_of(self, key: K) -> int:
        """The id of ``key``, assigning the next one if new."""
        kid = self.ids.get(key)
        if kid is None:
            kid = len(self.names)
            self.ids[key] = kid
            self.names.append(key)
            self.encoded.append(EncodedKey(self._encode(key)))
        return kid

    def ids_of(self, keys: Sequence[K]) -> IntArray:
        """Vectorized :meth:`id_of`: new keys get ids in first-seen order."""
        ids = self.ids
        distinct = dict.fromkeys(keys).keys()
        if not distinct <= ids.keys():  # a set comparison in C: no Python loop when none is new
            for k in distinct:
                if k not in ids:
                    self.id_of(k)
        return np.fromiter(map(ids.__getitem__, keys), dtype=np.int64, count=len(keys))

    def compact(self, live: IntArray) -> IntArray:
        """Keep only the ids in ``live`` (sorted); return the old-id -> new-id map (-1: gone)."""
        remap = np.full(len(self.names), -1, dtype=np.int64)
        remap[live] = np.arange(len(live), dtype=np.int64)
        keep = live.tolist()
        self.names = [self.names[k] for k in keep]
        self.encoded = [self.encoded[k] for k in keep]
        self.ids = {v: i for i, v in enumerate(self.names)}
        return remap
