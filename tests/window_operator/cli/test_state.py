"""``inspect``'s JSON lines: stored values written as results are, failures shown."""

from __future__ import annotations

import numpy as np
import orjson

from window_operator.cli.state import _inspect_json
from window_operator.results import FailedValue


def test_stored_values_are_written_as_results_are_and_failures_are_shown() -> None:
    line: dict[str, object] = {
        "key": "a",
        "values": {
            "n": np.int64(3),  # what orjson writes with the job's options
            "big": {"x": 2**80, "nan": float("nan")},  # the stdlib fallback: NaN is null
            "failed": FailedValue("aggregation 'failed': finish raised KeyError"),
            "set": {"a"},
        },
    }
    assert orjson.loads(_inspect_json(line)) == {
        "key": "a",
        "values": {
            "n": 3,
            "big": {"x": 2**80, "nan": None},
            "failed": {"error": "aggregation 'failed': finish raised KeyError"},
            "set": {"error": "no JSON form: set"},
        },
    }
