"""Interned session keys: one per grouping key, or per (key, partition) for tuple sessions."""

from __future__ import annotations

import numpy as np

from stores.keyspace import GroupKeyLayout, encode_key
from window_operator.session.keys import SessionKeys, order_code
from window_operator.session.state import SESSIONS


def parts(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.int64)


def test_time_session_keys_are_the_grouping_keys() -> None:
    keys = SessionKeys(per_partition=False)
    assert keys.ids(["b", "a", "b"], parts(0, 1, 2)).tolist() == [0, 1, 0]
    assert keys.id_of("c", 5) == 2
    assert keys.name == ["b", "a", "c"]
    assert keys.enc == [encode_key(k) for k in "bac"]
    assert keys.prefix == [SESSIONS.prefix(encode_key(k)) for k in "bac"]
    assert keys.part_arr.tolist() == [0, 0, 0]


def test_tuple_session_keys_are_per_partition_and_come_back_from_the_store() -> None:
    keys = SessionKeys(per_partition=True)
    assert keys.ids(["a", "a", "b", "a"], parts(0, 1, 0, 0)).tolist() == [0, 1, 2, 0]
    assert (keys.name, keys.part_arr.tolist()) == (["a", "a", "b"], [0, 1, 0])
    layout = GroupKeyLayout(per_partition=True)
    stored = [layout.encode(encode_key("b"), 0), layout.encode(encode_key("c"), 4)]
    assert keys.ids_of_encoded(stored).tolist() == [2, 3]
    assert (keys.name[3], int(keys.part_arr[3])) == ("c", 4)
    assert keys.id_of("c", 4) == 3


def test_emission_order_codes_are_stable_across_instances() -> None:
    one, two = SessionKeys(per_partition=False), SessionKeys(per_partition=False)
    one.ids(["x", "y"], parts(0, 0))
    two.ids(["y", "x"], parts(0, 0))
    assert one.code.tolist() == two.code[::-1].tolist()
    assert one.code[0] == order_code(encode_key("x"))
