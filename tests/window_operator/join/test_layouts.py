"""The Message Store layout of a join: the seed's key matrix, or ``join.store``."""

from __future__ import annotations

import pytest
from joinkit import orders_runtime

from window_operator.config import ConfigError
from window_operator.join import StoreLayout


def test_auto_layout_follows_the_seed_matrix() -> None:
    assert orders_runtime(range="2m").spec.layout is StoreLayout.FIELDS_TS_OFFSET
    assert orders_runtime(range="30s").spec.layout is StoreLayout.TS_FIELDS_OFFSET
    assert orders_runtime(range="30s", on=[]).spec.layout is StoreLayout.TS_OFFSET
    assert orders_runtime(rows=3).spec.layout is StoreLayout.FIELDS_OFFSET
    with pytest.raises(ConfigError, match="join.store"):
        orders_runtime(rows=3, store="ts_offset")


def test_an_explicit_store_is_taken_as_is() -> None:
    layout = orders_runtime(range="2m", store="ts_offset").spec.layout
    assert layout is StoreLayout.TS_OFFSET and not layout.key_first
    assert orders_runtime(range="5s", store="fields_ts_offset").spec.layout.key_first
