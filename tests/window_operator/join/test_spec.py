"""The settings of a join operator and what follows from them."""

from __future__ import annotations

from typing import Any

import pytest

from window_operator.join import LEFT, RIGHT, JoinSpec, StoreLayout


def spec(**kw: Any) -> JoinSpec:
    return JoinSpec(left="L", right="R", on=("k",), **kw)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"right": "L"}, "different names"),
        ({"kind": "outer"}, "kind must be"),
        ({"rows": 0, "layout": StoreLayout.FIELDS_OFFSET}, "rows must be >= 1"),
        ({"rows": 2, "kind": "left", "layout": StoreLayout.FIELDS_OFFSET}, "inner joins"),
        ({"rows": 2}, "fields_offset layout"),
        ({"layout": StoreLayout.FIELDS_OFFSET}, "is for rows joins"),
        ({"lo": 5, "hi": 1}, "lo must not exceed hi"),
        ({"retention": -1}, ">= 0"),
    ],
)
def test_inconsistent_settings_are_refused(kw: dict[str, Any], message: str) -> None:
    args = {"left": "L", "right": "R", **kw}
    with pytest.raises(ValueError, match=message):
        JoinSpec(**args)


def test_reach_deadlines_and_cutoffs_follow_the_condition() -> None:
    # -3 <= right.ts - left.ts <= 4
    s = spec(lo=-3, hi=4, retention=100, kind="full")
    assert s.reach(RIGHT) == (-3, 4) and s.reach(LEFT) == (-4, 3)
    assert (s.deadline(LEFT, 10), s.deadline(RIGHT, 10)) == (14, 13)
    assert (s.cutoff(LEFT, 1000), s.cutoff(RIGHT, 1000)) == (896, 897)
    assert s.outer(LEFT) and s.outer(RIGHT) and not spec(kind="left").outer(RIGHT)
    assert s.frame_ms == 1000 and spec(lo=0, hi=5000).frame_ms == 5000
    assert spec(retention=4_000_000).sweep_ms == 2_000_000


def test_shape_names_the_state_layout_and_policy_the_clock() -> None:
    s = spec(lo=0, hi=10, layout=StoreLayout.TS_FIELDS_OFFSET, idle_timeout=5, retention=9)
    assert s.shape == {
        "type": "join",
        "layout": "ts_fields_offset",
        "on": ["k"],
        "kind": "inner",
        "lo": 0,
        "hi": 10,
        "rows": None,
    }
    assert (s.policy.idle_timeout, s.policy.retention, s.policy.allowed_lateness) == (5, 9, 0)
