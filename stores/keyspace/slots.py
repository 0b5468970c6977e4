"""Key-first records in numbered slots per key (count windows' rings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from stores.keys import KeyEncodingError, decode_key_first_key, encode_i64
from stores.keyspace.base import EncodedKey, Keyspace, corrupt

__all__ = [
    "KeySlotEntry",
    "KeySlotKeyspace",
]

# -- key-first records in numbered slots per key (count windows) ------------------------


class KeySlotEntry(NamedTuple):
    """A parsed key-slot key."""

    key: str
    slot: int


class KeySlotKeyspace(Keyspace):
    """``tag + str(key) + i64(slot)`` records: a key's records in slot order, one range.

    For state a key keeps in a fixed set of numbered slots (a ring), so a record is
    replaced by overwriting its slot rather than deleted.
    """

    def key(self, key: EncodedKey, slot: int) -> bytes:
        """The store key of one record."""
        return self.tag + key + encode_i64(slot)

    def keys(self, keys: Sequence[EncodedKey], slots: Sequence[int]) -> list[bytes]:
        """Store keys of many records (few distinct slots: their encodings are shared)."""
        suffixes = {s: encode_i64(s) for s in dict.fromkeys(slots)}
        tag = self.tag
        return [tag + k + suffixes[s] for k, s in zip(keys, slots, strict=True)]

    def parse(self, data: bytes) -> KeySlotEntry:
        """The key and slot of a store key."""
        try:
            tag, key, slot = decode_key_first_key(data, len(self.tag))
        except KeyEncodingError as exc:
            raise corrupt(self.name, data, exc) from exc
        if tag != self.tag:
            raise corrupt(self.name, data, ValueError("unexpected tag"))
        return KeySlotEntry(key, slot)
