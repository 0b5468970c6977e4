"""Window shapes: tumbling step, hopping size a multiple of step, bounded sizes."""

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
    [("25s", "10s"), ("1m", "7s")],
)
def test_hopping_size_must_be_multiple_of_step(size: str, step: str) -> None:
    doc = minimal() | {"window": {"type": "hopping", "size": size, "step": step}}
    path, message = one_problem(doc)
    assert path == "window.size"
    assert message.startswith("must be a positive multiple of window.step")
    assert f"size {size}, step {step}" in message


def test_a_hopping_step_longer_than_its_size_is_told_as_such() -> None:
    """Size and step swapped: the message names step, not a multiple of it to take."""
    doc = minimal() | {"window": {"type": "hopping", "size": "5s", "step": "10s"}}
    path, message = one_problem(doc)
    assert path == "window.step"
    assert message == (
        "must not be longer than window.size (got size 5s, step 10s): step is how often "
        "a window starts, size how long it lasts"
    )


@pytest.mark.parametrize("kind", ["count", "offsets"])
def test_a_count_step_larger_than_its_size_is_told_as_such(kind: str) -> None:
    doc = minimal() | {"window": {"type": kind, "size": 10, "step": 20}}
    assert one_problem(doc) == (
        "window.step",
        "must not be larger than window.size (20 vs 10): step is how often a window "
        "starts, size how many it holds",
    )


def test_hopping_size_equal_to_step_is_allowed() -> None:
    doc = minimal() | {"window": {"type": "hopping", "size": "10s", "step": "10s"}}
    window = parse_config(doc, base_dir=ROOT).window
    assert window == HoppingWindow(size=10_000, step=10_000)


MAX = 2**53  # the largest count, size or duration (ms) of a job


@pytest.mark.parametrize(
    ("window", "path", "message"),
    [
        (
            {"type": "count", "size": 2**63},
            "window.size",
            f"must be at most {MAX} (got {2**63})",
        ),
        (
            {"type": "offsets", "size": 2**64},
            "window.size",
            f"must be at most {MAX} (got {2**64})",
        ),
        (
            {"type": "session", "max_idle_messages": 2**64},
            "window.max_idle_messages",
            f"must be at most {MAX} (got {2**64})",
        ),
        (
            {"type": "tumbling", "size": 2**63 - 1},
            "window.size",
            f"{2**63 - 1} is too long a duration (at most {MAX}ms)",
        ),
        (
            {"type": "tumbling", "size": 2**63},
            "window.size",
            f"{2**63} is too long a duration (at most {MAX}ms)",
        ),
        (
            {"type": "hopping", "size": "1m", "step": f"{MAX + 1}ms"},
            "window.step",
            f"'{MAX + 1}ms' is too long a duration (at most {MAX}ms)",
        ),
        (
            {"type": "session", "gap": "10000000000000000000d"},
            "window.gap",
            # (not "or null/off to disable": tuple sessions leave the gap out)
            f"'10000000000000000000d' is too long a duration (at most {MAX}ms); or leave gap"
            " out for tuple sessions (max_idle_messages)",
        ),
    ],
)
def test_counts_sizes_and_durations_are_bounded(
    window: dict[str, object], path: str, message: str
) -> None:
    """Beyond the bound they overflow event-time arithmetic on int64 epoch ms (or never
    fire); an invalid count size is reported once, not again through the step."""
    assert one_problem(minimal() | {"window": window}) == (path, message)


@pytest.mark.parametrize(
    "window",
    [
        {"type": "count", "size": MAX},
        {"type": "offsets", "size": MAX},
        {"type": "session", "max_idle_messages": MAX},
        {"type": "session", "gap": MAX},
        {"type": "tumbling", "size": MAX},
        {"type": "hopping", "size": MAX, "step": MAX // 2},
    ],
)
def test_the_bound_itself_is_allowed(window: dict[str, object]) -> None:
    doc = minimal() | {"window": window}
    assert parse_config(doc, base_dir=ROOT).window.type == window["type"]


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ({"type": "hopping", "size": "1001s", "step": "1ms"},
         "spans 1001000 1ms steps, at most 1,000,000"),
        ({"type": "count", "size": 2**53, "step": 1},
         f"spans {2**53} steps of 1, at most 1,000,000"),
    ],
)  # fmt: skip
def test_a_window_of_more_than_a_million_steps_is_refused(
    window: dict[str, object], message: str
) -> None:
    """Every event would be in that many windows (a hopping window of 2**53 steps made
    simulate allocate petabytes)."""
    path, got = one_problem({**minimal(), "window": window})
    assert path == "window.size" and got.startswith(message)
    day = {"type": "hopping", "size": "1d", "step": "1s"}
    assert parse_config({**minimal(), "window": day}, base_dir=ROOT).window == HoppingWindow(
        size=86_400_000, step=1_000
    )


@pytest.mark.parametrize(
    "window",
    [
        {"type": "session", "gap": "1m"},
        {"type": "count", "size": 5},
        {"type": "offsets", "size": 5},
    ],
)
def test_retention_size_is_refused_for_windows_off_the_time_axis(
    window: dict[str, object],
) -> None:
    """It had no effect on them, silently."""
    path, message = one_problem({**minimal(), "window": window, "retention": {"size": 3}})
    assert path == "retention.size"
    assert message.endswith(f"not to window.type {window['type']}")
