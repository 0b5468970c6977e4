"""The job factory: operations, decoder and policies from a config; problems name fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import BASE_CONFIG, runtime_for

from window_operator.config import ConfigError, parse_config
from window_operator.count_windows import CountWindowAggregator
from window_operator.job import build_runtime
from window_operator.session import SessionAggregator
from window_operator.timewindows import WindowedAggregator


def test_every_window_shape_gets_its_operator(tmp_path: Path) -> None:
    shapes = [
        ({"type": "tumbling", "size": "10s"}, WindowedAggregator),
        ({"type": "session", "gap": "10s"}, SessionAggregator),
        ({"type": "count", "size": 5}, CountWindowAggregator),
    ]
    for i, (window, kind) in enumerate(shapes):
        op = runtime_for(window=window).open_task(tmp_path / str(i))
        try:
            assert isinstance(op, kind)
        finally:
            op.close()


def test_retention_size_caps_the_retention_of_time_windows() -> None:
    rt = runtime_for(
        window={"type": "hopping", "size": "1m", "step": "10s"},
        retention={"time": "1h", "size": 3},
    )
    assert rt.policy.retention == 30_000
    assert rt.decoder.numeric_fields == ()


def test_operation_problems_are_config_errors_naming_the_field() -> None:
    doc = {**BASE_CONFIG, "aggregations": [{"name": "x", "op": "nonesuch"}]}
    with pytest.raises(ConfigError, match=r"aggregations\.0\.op"):
        build_runtime(parse_config(doc, base_dir=Path(".")))
