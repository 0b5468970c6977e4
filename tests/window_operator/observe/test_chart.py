"""The demo's chart and printer take a session's RETRACT (a tombstone on Kafka)."""

from __future__ import annotations

import orjson

from window_operator.demo import _point, _retraction
from window_operator.observe.chart import ResultPoint, latest_windows


def _p(key: str, start: int, end: int, kind: str, value: float = 0.0) -> ResultPoint:
    return ResultPoint(key, start, kind, value, end)


def test_a_retracted_session_leaves_the_chart() -> None:
    points = [
        _p("a", 100, 110, "ON_TIME", 1),
        _p("a", 118, 128, "EARLY", 1),
        # a late bridge merges both: [100, 128)
        _p("a", 100, 110, "RETRACT"),
        _p("a", 118, 128, "RETRACT"),
        _p("a", 100, 128, "LATE", 3),
    ]
    latest, late = latest_windows(points)
    assert latest == {"a": {100: 3}}
    assert late["a"] == [(100, 3)]


def test_a_retraction_read_after_the_result_that_replaced_it_keeps_that_result() -> None:
    # the new session [100, 128) and the tombstone of [100, 110) have different Kafka
    # keys, so a consumer of several output partitions may read them in either order
    points = [
        _p("a", 100, 110, "ON_TIME", 1),
        _p("a", 100, 128, "LATE", 3),
        _p("a", 100, 110, "RETRACT"),
    ]
    latest, _ = latest_windows(points)
    assert latest == {"a": {100: 3}}


def test_the_printer_reads_a_tombstone_as_a_retract_point() -> None:
    key = orjson.dumps({"key": "a", "window_start": 100, "window_end": 110})
    r = _retraction(key)
    assert r is not None and r["kind"] == "RETRACT"
    from pathlib import Path

    from window_operator.config import parse_config

    config = parse_config(
        {
            "job": "j",
            "input": {"key": "user", "timestamp": "ts"},
            "window": {"type": "session", "gap": "10s"},
            "aggregations": [{"name": "n", "op": "count"}],
        },
        base_dir=Path("."),
    )
    point = _point(config, r)
    assert (point.key, point.window_start, point.kind, point.window_end) == (
        "a",
        100,
        "RETRACT",
        110,
    )
    assert _retraction(None) is None
    assert _retraction(b"not json") is None
    assert _retraction(b'{"left": [0, 1], "right": null}') is None


def test_sessions_of_one_start_read_partition_by_partition() -> None:
    # [100, 110) grows to [100, 115), then to [100, 120): each window is its own Kafka
    # key; reading one output partition, then the other, mixes their order
    partition_a = [
        _p("a", 100, 110, "EARLY", 1),
        _p("a", 100, 110, "RETRACT"),
        _p("a", 100, 120, "ON_TIME", 3),
    ]
    partition_b = [_p("a", 100, 115, "EARLY", 2), _p("a", 100, 115, "RETRACT")]
    for points in (partition_a + partition_b, partition_b + partition_a):
        latest, _ = latest_windows(points)
        assert latest == {"a": {100: 3}}
