"""The task checkpoint (progress of a task) and restoring an operator from its store.

Restore loads the sessions of index buckets at or after the watermark's (the open ones)
plus the ones with a LATE update pending; every other stored session ended at or before
the watermark and is read back only when a late event may touch it.
"""

from __future__ import annotations

import numpy as np
import orjson

from stores.keys import encode_i64, prefix_upper_bound
from stores.rocks import ColumnFamily
from window_operator.kernel.checkpoint import CHECKPOINT_KEY
from window_operator.policies import END_OF_TIME
from window_operator.session.keys import INDEX_TAG, PENDING_TAG, SESSION_TAG
from window_operator.session.loading import StoredSessionLoader
from window_operator.session.records import FLAG_PENDING, Decoded

__all__ = ["CHECKPOINT_KEY", "SessionCheckpoint"]



class SessionCheckpoint(StoredSessionLoader):
    """Writes and reads the checkpoint; restores the cache from the store."""

    def _checkpoint_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "v": 1,
                "shape": "tuple_session" if self.by_offsets else "session",
                "offsets": {str(p): o for p, o in self._offsets.items()},
                "max_ts": {str(p): t for p, t in self._max_ts.items()},
                "watermark": self._wm,
                "late_since": self._late_since,
                "last_early": self._last_early,
                "expired_upto": self._expired_upto,
                "max_len": self._max_len,
                "bucket_ms": self._bucket,
                "batches": self.batches,
            }
        )

    def _restore(self) -> None:
        data = self.store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY)
        if data is None:
            return
        cp = orjson.loads(data)
        shape = "tuple_session" if self.by_offsets else "session"
        if cp.get("shape") != shape:
            raise ValueError(
                f"the store at {self.store.path} holds {cp.get('shape', 'window')!r} state, "
                f"not {shape!r}: the window shape changed; use a new state directory"
            )
        self._offsets = {int(p): int(o) for p, o in cp["offsets"].items()}
        self._max_ts = {int(p): int(t) for p, t in cp["max_ts"].items()}
        self._wm = int(cp["watermark"])
        self._late_since = cp["late_since"]
        self._last_early = cp["last_early"]
        self._expired_upto = cp["expired_upto"]
        self._max_len = int(cp["max_len"])
        self._bucket = int(cp["bucket_ms"])
        self.batches = int(cp["batches"])
        self._eot = self._wm >= END_OF_TIME
        meta = ColumnFamily.WINDOW_META
        if self.by_offsets:
            # ended tuple sessions are deleted at flush: every stored one is open
            hi = prefix_upper_bound(SESSION_TAG)
            found = list(self.store.scan(meta, SESSION_TAG, hi))
            keys = [k for k, _ in found]
            values: list[bytes | None] = [v for _, v in found]
        else:
            # Scan bounds stay bound to names while iterating: TaskStore.scan hands `end`
            # to RocksDB without a copy, so a temporary bound would be freed mid-scan.
            lo = INDEX_TAG + encode_i64(self._wm // self._bucket)
            hi = prefix_upper_bound(INDEX_TAG)
            rest = dict.fromkeys(k[9:] for k, _ in self.store.scan(meta, lo, hi))
            p_hi = prefix_upper_bound(PENDING_TAG)
            for k, _ in self.store.scan(meta, PENDING_TAG, p_hi):
                rest[k[1:]] = None
            keys = [SESSION_TAG + r for r in rest]
            values = self.store.multi_get(meta, keys)
        present = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        if present:
            rec = self.codec.decode([k for k, _ in present], [v for _, v in present])
            if not self.by_offsets:
                ends = rec.head["end"].astype(np.int64) - self._pad + self._gap
                want = (ends > self._wm) | ((rec.head["flags"] & FLAG_PENDING) != 0)
                w = np.flatnonzero(want)
                rec = Decoded(rec.kid[w], rec.start[w], rec.head[w], [rec.tails[i] for i in w])
            self._load(rec, lambda _: set())
        # every stored session that was not loaded ended at or before the watermark
        self._disk_end_default = self._wm
