"""Shared test helpers: build jobs from small config dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from window_operator.config import parse_config
from window_operator.job import JobRuntime, build_runtime

BASE_CONFIG: dict[str, Any] = {
    "job": "test",
    "input": {"key": "k", "timestamp": "ts"},
    "window": {"type": "tumbling", "size": "10s"},
    "aggregations": [{"name": "n", "op": "count"}],
    "emit": {"late": "per_arrival"},
    "retention": {"time": "1d"},
}


def runtime_for(**overrides: Any) -> JobRuntime:
    """A runtime from BASE_CONFIG with top-level sections replaced."""
    cfg = {**BASE_CONFIG, **overrides}
    return build_runtime(parse_config(cfg, base_dir=Path(".")))
