"""Interned join keys: the generic key table plus each key's output JSON."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stores.keys import FieldValue, decode_fields, encode_fields
from stores.keyspace import EncodedKey
from window_operator.arrays import IntArray, ObjArray
from window_operator.join.common import JoinKey
from window_operator.jsonbytes import json_bytes
from window_operator.keytable import KeyTable

__all__ = ["JoinKeyTable"]


class JoinKeyTable(KeyTable[JoinKey]):
    """Interns join keys as small integers (see :class:`KeyTable`).

    A key's store encoding is its encoded equal fields; ``json[kid]`` is the key object
    of the output records (``{<on field>: <value>, ...}``), and ``by_encoded`` finds a
    key from the encoded fields of a stored message.
    """

    def __init__(self, on: tuple[str, ...]) -> None:
        super().__init__(self._encode_fields)
        self.on = on
        self.single = len(on) == 1
        self.json: list[bytes] = []
        self.by_encoded: dict[EncodedKey, int] = {}
        self._json_arr: ObjArray = np.empty(0, dtype=object)

    def fields(self, kid: int) -> tuple[FieldValue, ...]:
        """The equal-field values of ``kid`` as a tuple."""
        return self.fields_of(self.names[kid])

    def id_of(self, key: JoinKey) -> int:
        """The id of ``key``, assigning the next one if new."""
        kid = super().id_of(key)
        if kid == len(self.json):
            fields = self.fields_of(key)
            self.json.append(json_bytes(dict(zip(self.on, fields, strict=True))))
            self.by_encoded[self.encoded[kid]] = kid
        return kid

    def ids_of(self, keys: Sequence[JoinKey]) -> IntArray:
        """Vectorized :meth:`id_of`; new keys get ids in first-seen order."""
        try:
            # the hot path: every key is known
            return np.fromiter(map(self.ids.__getitem__, keys), dtype=np.int64, count=len(keys))
        except KeyError:
            return super().ids_of(keys)

    def from_encoded(self, enc: EncodedKey) -> int:
        """The id of the key whose equal fields encode to ``enc`` (interned if new)."""
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
        remap = super().compact(live)
        self.json = [self.json[k] for k in live.tolist()]
        self.by_encoded = {e: i for i, e in enumerate(self.encoded)}
        self._json_arr = np.empty(0, dtype=object)
        return remap

    @staticmethod
    def fields_of(key: JoinKey) -> tuple[FieldValue, ...]:
        """The equal-field values of a join key as a tuple."""
        return key if isinstance(key, tuple) else (key,)

    @staticmethod
    def _encode_fields(key: JoinKey) -> bytes:
        return encode_fields(key if isinstance(key, tuple) else (key,))
