"""``get_windows`` (the seed's query API, behind ``inspect``) against a naive oracle."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from helpers import runtime_for
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from window_operator.timewindows import WindowedAggregator

S = 1000


def expected_windows(
    events: list[tuple[str, int]], key: str, size: int, step: int, start: int, end: int
) -> dict[int, int]:
    """Event count of every window of ``key`` with an event that overlaps [start, end)."""
    counts: Counter[int] = Counter()
    for k, ts in events:
        if k != key:
            continue
        first = ts - ts % step - size + step
        for w in range(first, ts + 1, step):
            if w < end and w + size > start:
                counts[w] += 1
    return dict(counts)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    k=st.integers(1, 4),
    step_s=st.sampled_from([1, 5, 10]),
    events=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 120 * S)), min_size=1, max_size=40
    ),
    flushed=st.integers(0, 40),
    start=st.integers(-30 * S, 150 * S),
    width=st.integers(1, 80 * S),
)
# a window whose events all lie at or after `end` (found only among frames past `end`)
@example(k=6, step_s=10, events=[("a", 100 * S)], flushed=0, start=0, width=100 * S)
@example(k=6, step_s=10, events=[("a", 100 * S)], flushed=1, start=0, width=100 * S)
# a start between frame boundaries, with the window's only frame not yet flushed
@example(k=6, step_s=10, events=[("a", 0)], flushed=0, start=5 * S, width=10 * S)
def test_get_windows_returns_every_stored_window_overlapping_the_range(
    tmp_path_factory: object,
    k: int,
    step_s: int,
    events: list[tuple[str, int]],
    flushed: int,
    start: int,
    width: int,
) -> None:
    step, size = step_s * S, k * step_s * S
    runtime = runtime_for(
        window={"type": "hopping", "size": f"{k * step_s}s", "step": f"{step_s}s"},
        watermark={"allowed_lateness": "1d"},  # every window stays open and stored
    )
    path: Path = tmp_path_factory.mktemp("q")  # type: ignore[attr-defined]
    agg: WindowedAggregator = runtime.open_task(path)
    try:
        rows = [{"k": key, "ts": ts} for key, ts in events]
        agg.add_batch(rows[:flushed])
        agg.flush()  # frames of the first part are in the store, the rest only in memory
        agg.add_batch(rows[flushed:])
        end = start + width
        got = {w.window_start: w.values["n"] for w in agg.get_windows("a", start, end)}
        assert got == expected_windows(events, "a", size, step, start, end)
        assert all(w.window_end - w.window_start == size for w in agg.get_windows("a", start, end))
    finally:
        agg.close()
