"""The live-state gauges of time windows (keys and windows not fired yet) against a naive
count over the events."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import runtime_for
from hypothesis import given, settings
from hypothesis import strategies as st

from window_operator.events import EventBatch

S = 1000


def naive(keys: list[str], ts: list[int], size: int, step: int, wm: int) -> tuple[int, int]:
    """Open windows (key, start) holding an event: every start of a window containing it
    whose end the watermark has not reached."""
    windows = set()
    for k, t in zip(keys, ts, strict=True):
        last = t - t % step
        for start in range(last - size + step, last + 1, step):
            if start + size > wm:
                windows.add((k, start))
    return len({k for k, _ in windows}), len(windows)


@settings(max_examples=40, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from("abcdefg"), st.integers(min_value=-30, max_value=200)),
        min_size=1,
        max_size=60,
    ),
    watermark_s=st.integers(min_value=-50, max_value=260),
    hopping=st.booleans(),
)
def test_live_state_counts_the_windows_that_have_not_fired(
    tmp_path_factory: object, events: list[tuple[str, int]], watermark_s: int, hopping: bool
) -> None:
    size, step = (30 * S, 10 * S) if hopping else (20 * S, 20 * S)
    window = {"type": "hopping", "size": size, "step": step} if hopping else {
        "type": "tumbling", "size": size}  # fmt: skip
    rt = runtime_for(window=window, retention={"time": "1h"}, watermark={"allowed_lateness": 0})
    path = Path(str(tmp_path_factory.mktemp("live")))  # type: ignore[attr-defined]
    agg = rt.open_task(path / "a")
    keys = [k for k, _ in events]
    ts = [t * S for _, t in events]
    # the events, then one event of another key that moves the watermark
    agg.add_batch(EventBatch.from_columns(keys, np.array(ts, dtype=np.int64)))
    agg.add_batch(EventBatch.from_columns(["~"], np.array([watermark_s * S], dtype=np.int64)))
    wm = agg.watermark
    live = agg.live_state()
    k_all, w_all = naive([*keys, "~"], [*ts, watermark_s * S], size, step, wm)
    assert (live.keys, live.windows) == (k_all, w_all)
    agg.close()
