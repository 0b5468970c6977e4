"""Interned join keys: small integer ids with each key's store encoding and output JSON."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from stores.keys import FieldValue, decode_fields, encode_fields
from window_operator.join.common import IntArray, ObjArray, dumps

__all__ = ["KeyTable"]


class KeyTable:
    """Interns join keys as small integers, with their store encoding and output JSON."""

    def __init__(self, on: tuple[str, ...]) -> None:
        self.on = on
        self.single = len(on) == 1
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []
        self.encoded: list[bytes] = []
        self.json: list[bytes] = []
        self.by_encoded: dict[bytes, int] = {}
        self._json_arr: ObjArray = np.empty(0, dtype=object)

    def __len__(self) -> int:
        return len(self.values)

    def fields(self, kid: int) -> tuple[FieldValue, ...]:
        """The equal-field values of ``kid`` as a tuple."""
        v = self.values[kid]
        return (v,) if self.single else tuple(v)

    def id_of(self, kv: Any) -> int:
        """The id of join key ``kv``, assigning the next one if new."""
        kid = self.ids.get(kv)
        if kid is None:
            kid = len(self.values)
            fields: tuple[FieldValue, ...] = (kv,) if self.single else tuple(kv)
            enc = encode_fields(fields)
            self.ids[kv] = kid
            self.values.append(kv)
            self.encoded.append(enc)
            self.json.append(dumps(dict(zip(self.on, fields, strict=True))))
            self.by_encoded[enc] = kid
        return kid

    def ids_of(self, kvs: Sequence[Any]) -> IntArray:
        """Vectorized :meth:`id_of`; new keys get ids in first-seen order."""
        ids = self.ids
        try:
            return np.fromiter(map(ids.__getitem__, kvs), dtype=np.int64, count=len(kvs))
        except KeyError:
            pass
        for kv in kvs:
            if kv not in ids:
                self.id_of(kv)
        return np.fromiter(map(ids.__getitem__, kvs), dtype=np.int64, count=len(kvs))

    def from_encoded(self, enc: bytes) -> int:
        """The id of the key whose equal fields encode to ``enc``."""
        kid = self.by_encoded.get(enc)
        if kid is not None:
            return kid
        fields = decode_fields(enc)
        return self.id_of(fields[0] if self.single else fields)

    def json_array(self) -> ObjArray:
        """The output JSON of every key, indexable by id arrays."""
        if len(self._json_arr) != len(self.json):
            arr = np.empty(len(self.json), dtype=object)
            arr[:] = self.json
            self._json_arr = arr
        return self._json_arr

    def compact(self, live: IntArray) -> IntArray:
        """Keep only the keys ``live`` (sorted ids); return the old-id -> new-id map."""
        remap = np.full(len(self.values), -1, dtype=np.int64)
        remap[live] = np.arange(len(live), dtype=np.int64)
        keep = live.tolist()
        self.values = [self.values[k] for k in keep]
        self.encoded = [self.encoded[k] for k in keep]
        self.json = [self.json[k] for k in keep]
        self.ids = {v: i for i, v in enumerate(self.values)}
        self.by_encoded = {e: i for i, e in enumerate(self.encoded)}
        self._json_arr = np.empty(0, dtype=object)
        return remap
