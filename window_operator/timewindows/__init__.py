"""Tumbling and hopping windows over frames (Jet): the windowed aggregator and its parts."""

from window_operator.timewindows.operator import WindowedAggregator

__all__ = ["WindowedAggregator"]
