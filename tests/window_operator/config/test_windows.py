"""Window shapes: tumbling step, hopping size a multiple of step."""

from __future__ import annotations

import pytest
from configkit import ROOT, minimal, one_problem

from window_operator.config import HoppingWindow, TumblingWindow, parse_config


def test_tumbling_step_equals_size() -> None:
    window = TumblingWindow(size=30_000)
    assert window.step == window.size == 30_000
    assert window.step_ms == 30_000


@pytest.mark.parametrize(
    ("size", "step"),
    [("25s", "10s"), ("5s", "10s"), ("1m", "7s")],
)
def test_hopping_size_must_be_multiple_of_step(size: str, step: str) -> None:
    doc = minimal() | {"window": {"type": "hopping", "size": size, "step": step}}
    path, message = one_problem(doc)
    assert path == "window.size"
    assert message.startswith("must be a positive multiple of window.step")
    assert f"size {size}, step {step}" in message


def test_hopping_size_equal_to_step_is_allowed() -> None:
    doc = minimal() | {"window": {"type": "hopping", "size": "10s", "step": "10s"}}
    window = parse_config(doc, base_dir=ROOT).window
    assert window == HoppingWindow(size=10_000, step=10_000)
