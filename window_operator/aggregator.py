"""Compatibility name: the windowed aggregator lives in :mod:`window_operator.timewindows`."""

from window_operator.kernel import StepStats, StoredWindow
from window_operator.timewindows import WindowedAggregator

__all__ = ["StepStats", "StoredWindow", "WindowedAggregator"]
