"""Helpers of the job config tests: a minimal job document and its problems."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from window_operator.config import ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "config"


def minimal() -> dict[str, Any]:
    """The smallest valid job document."""
    return {
        "job": "j",
        "input": {"timestamp": "ts"},
        "window": {"type": "tumbling", "size": "1m"},
        "aggregations": [{"name": "n", "op": "count"}],
    }


def problem_lines(doc: dict[str, Any], base_dir: Path = ROOT) -> list[str]:
    """The problem lines of the ConfigError that ``doc`` raises (without the header)."""
    with pytest.raises(ConfigError) as info:
        parse_config(doc, base_dir=base_dir, source="job.yaml")
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid job config job.yaml:"
    assert all(line.startswith("  - ") for line in lines[1:])
    assert len(lines) == len(info.value.problems) + 1
    return [line[4:] for line in lines[1:]]


def one_problem(doc: dict[str, Any], base_dir: Path = ROOT) -> tuple[str, str]:
    """The (path, message) of the single problem ``doc`` has."""
    lines = problem_lines(doc, base_dir)
    assert len(lines) == 1, lines
    path, _, message = lines[0].partition(": ")
    return path, message


def write(directory: Path, text: str, name: str = "job.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path
