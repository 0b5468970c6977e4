"""The join job root: the bare YAML ``on`` key and the one-condition rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from window_operator.config import ConfigError, JoinJobConfig, load_any_config, parse_any_config


def test_join_job_config_with_a_bare_yaml_on_key(tmp_path: Path) -> None:
    path = tmp_path / "join.yaml"
    path.write_text(
        "job: oj\n"
        "join:\n"
        "  left: {name: orders, timestamp: time}\n"
        "  right: {name: shipments, timestamp: time}\n"
        "  on: [id]\n"
        "  between: [-2m, +5m]\n"
        "  kind: left\n"
    )
    config = load_any_config(path)
    assert isinstance(config, JoinJobConfig)
    assert config.join.on == ("id",)
    assert config.join.bounds == (-120_000, 300_000)
    assert config.join.left.topic_name == "orders"


def test_join_config_needs_exactly_one_condition(tmp_path: Path) -> None:
    data = {
        "job": "oj",
        "join": {
            "left": {"name": "a", "timestamp": "t"},
            "right": {"name": "a", "timestamp": "t"},
            "on": ["id"],
        },
    }
    with pytest.raises(ConfigError) as err:
        parse_any_config(data, base_dir=tmp_path)
    text = str(err.value)
    assert "join.range: set exactly one of join.range, join.between or join.rows" in text
    assert "join.right.name: must differ from join.left.name" in text
