"""When a state task counts its live state: every batch, or now and then when kept open,
and less often when a count is costly."""

from __future__ import annotations

from collections.abc import Callable

from window_operator.runtime.state_gauge import EVERY_S, StateFigures, StateGauge


class Clock:
    """Seconds that pass only when told to (a count moves it by its cost)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counter(clock: Clock, cost: float) -> tuple[list[float], Callable[[], StateFigures]]:
    counted: list[float] = []

    def count() -> StateFigures:
        counted.append(clock.now)
        clock.now += cost
        return StateFigures(store_bytes=len(counted), live_keys=1, live_windows=2)

    return counted, count


def test_a_task_of_one_batch_counts_every_time() -> None:
    clock = Clock()
    gauge = StateGauge(clock=clock)
    counted, count = counter(clock, 0.0)
    for _ in range(3):
        gauge.read(count, every_time=True)
    assert len(counted) == 3


def test_a_task_kept_open_counts_first_then_every_few_seconds_and_repeats_between() -> None:
    clock = Clock()
    gauge = StateGauge(clock=clock)
    counted, count = counter(clock, 0.001)
    seen = []
    for _ in range(25):  # a batch every second for 25 s
        seen.append(gauge.read(count, every_time=False).store_bytes)
        clock.now += 1.0
    assert counted[0] == 0.0 and len(counted) == 5, counted
    assert all(b - a >= EVERY_S for a, b in zip(counted, counted[1:], strict=False))
    assert seen[:6] == [1, 1, 1, 1, 1, 2], "the last figures are repeated in between"


def test_a_costly_count_waits_long_enough_to_take_at_most_its_share() -> None:
    clock = Clock()
    gauge = StateGauge(clock=clock, share=0.05)
    counted, count = counter(clock, 2.0)  # a count takes 2 s: wait 40 s, not 5 s
    for _ in range(200):
        gauge.read(count, every_time=False)
        clock.now += 0.5
    gaps = [b - a for a, b in zip(counted, counted[1:], strict=False)]
    assert gaps and min(gaps) >= 40.0, gaps
    # over whole cycles (a count and its wait) counting took its share, no more
    assert 2.0 * (len(counted) - 1) / counted[-1] <= 0.05 + 1e-9
