"""Interned join keys: ids, store encodings, output JSON and compaction."""

from __future__ import annotations

import numpy as np

from stores.keys import encode_fields
from window_operator.join.keys import JoinKeyTable


def test_keys_get_ids_encodings_and_json_in_first_seen_order() -> None:
    table = JoinKeyTable(("id",))
    assert table.ids_of([7, "a", 7, 3]).tolist() == [0, 1, 0, 2]
    assert table.names == [7, "a", 3]
    assert table.encoded[1] == encode_fields(["a"])
    assert table.json == [b'{"id":7}', b'{"id":"a"}', b'{"id":3}']
    assert table.json_array()[np.array([2, 0])].tolist() == [b'{"id":3}', b'{"id":7}']
    assert table.fields(0) == (7,) and table.id_of("a") == 1


def test_multi_field_and_empty_keys() -> None:
    table = JoinKeyTable(("k", "k2"))
    kid = table.id_of((1, "x"))
    assert table.fields(kid) == (1, "x") and table.json[kid] == b'{"k":1,"k2":"x"}'
    none = JoinKeyTable(())
    assert none.fields(none.id_of(())) == () and none.json == [b"{}"]


def test_stored_encodings_find_or_intern_their_key() -> None:
    table = JoinKeyTable(("id",))
    table.id_of(5)
    assert table.from_encoded(table.encoded[0]) == 0
    new = table.from_encoded(encode_fields(["z"]))  # e.g. a message read back from disk
    assert (new, table.names[new], table.by_encoded[table.encoded[new]]) == (1, "z", 1)


def test_compact_keeps_the_live_keys_and_renumbers_them() -> None:
    table = JoinKeyTable(("id",))
    table.ids_of([10, 11, 12, 13])
    remap = table.compact(np.array([1, 3], dtype=np.int64))
    assert remap.tolist() == [-1, 0, -1, 1]
    assert table.names == [11, 13] and table.json == [b'{"id":11}', b'{"id":13}']
    assert table.by_encoded == {encode_fields([11]): 0, encode_fields([13]): 1}
    assert table.json_array().tolist() == [b'{"id":11}', b'{"id":13}']
    assert table.ids_of([13, 10]).tolist() == [1, 2]  # a forgotten key comes back new
