"""Store key encodings of session state, and the interned session keys of a task.

Tags of the Window Meta Store (see the package notes): ``S`` session records, ``X`` the
expiry/restore index, ``P`` sessions with a LATE update pending.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from stores.keys import MAX_I64, MIN_I64, decode_i64, decode_str, encode_i64
from window_operator.keytable import KeyTable
from window_operator.session.arrays import IntArray

__all__ = [
    "INDEX_TAG",
    "MIN_I64_BYTES",
    "PENDING_TAG",
    "SESSION_TAG",
    "SessionKeys",
    "clamp_i64",
    "i64_bytes",
    "order_code",
]

SESSION_TAG = b"S"
INDEX_TAG = b"X"
PENDING_TAG = b"P"
MIN_I64_BYTES = encode_i64(MIN_I64)
_SIGN = np.uint64(1 << 63)


def i64_bytes(values: IntArray) -> bytes:
    """``encode_i64`` of every value, concatenated (8 bytes each)."""
    flipped = values.astype(np.int64, copy=False).view(np.uint64) ^ _SIGN
    return flipped.astype(">u8").tobytes()


def clamp_i64(x: int) -> int:
    """``x`` clamped to the int64 range (a scan bound)."""
    return min(max(x, MIN_I64), MAX_I64)


def order_code(encoded: bytes) -> int:
    """A stable 62-bit code of a session key, so emission order survives a restore."""
    return (zlib.crc32(encoded) << 30) ^ zlib.adler32(encoded)


class SessionKeys:
    """Interns session keys: the grouping key, plus the partition for tuple sessions.

    ``enc[kid]`` is the key's store encoding (``str(key)`` or ``str(key) + i64(p)``),
    ``prefix[kid]`` its session record prefix, ``name[kid]`` the grouping key,
    ``part_arr[kid]`` the partition (0 for time sessions) and ``code[kid]`` a stable
    hash used to order emissions.
    """

    def __init__(self, per_partition: bool) -> None:
        self.per_partition = per_partition
        self.table: KeyTable[str] = KeyTable()
        self._pairs: dict[tuple[int, int], int] = {}
        self._by_enc: dict[bytes, int] = {}
        self.name: list[str] = [] if per_partition else self.table.names
        self.enc: list[bytes] = [] if per_partition else self.table.encoded  # type: ignore[assignment]
        self.prefix: list[bytes] = []
        self.code: IntArray = np.zeros(0, dtype=np.int64)
        self.part_arr: IntArray = np.zeros(0, dtype=np.int64)
        self._parts: list[int] = []

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

    def id_of_encoded(self, encoded: bytes) -> int:
        """The id of a session key from its store encoding (assigned if new).

        Call :meth:`sync` after interning keys this way, before using the derived columns.
        """
        kid = self._by_enc.get(encoded)
        if kid is not None:
            return kid
        key, pos = decode_str(encoded, 0)
        skid = self.table.id_of(key)
        return self._pair_id(skid, decode_i64(encoded, pos)) if self.per_partition else skid

    def _pair_id(self, skid: int, part: int) -> int:
        kid = self._pairs.get((skid, part))
        if kid is None:
            kid = len(self.enc)
            self._pairs[(skid, part)] = kid
            self.name.append(self.table.names[skid])
            self.enc.append(self.table.encoded[skid] + encode_i64(part))
            self._parts.append(part)
        return kid

    def sync(self) -> None:
        """Derive the per-key columns of the keys interned since the last call (in bulk)."""
        have, n = len(self.prefix), len(self.enc)
        if n == have:
            return
        new = self.enc[have:n]
        self.prefix.extend(SESSION_TAG + e for e in new)
        self._by_enc.update(zip(new, range(have, n), strict=True))
        codes = np.fromiter((order_code(e) for e in new), dtype=np.int64, count=n - have)
        self.code = np.concatenate([self.code, codes])
        parts = self._parts[have:n] if self.per_partition else [0] * (n - have)
        self.part_arr = np.concatenate([self.part_arr, np.asarray(parts, dtype=np.int64)])
