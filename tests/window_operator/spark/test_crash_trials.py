"""Exactly once under random kills: the crash harness of ``benchmarks/crash_trials.py``,
reduced (five kills of an aggregation job, one with a broker SIGKILL), in both shapes."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import crash_trials  # noqa: E402


@pytest.mark.parametrize("mode", ["micro_batch", "long_running"])
def test_five_random_kills_lose_nothing_and_send_nothing_twice(mode: str) -> None:
    args = argparse.Namespace(
        mode=mode,
        kills=5,
        events=1_500,
        broker_kills=0.0,
        broker_kill_trials={2},
        wipe=0.2,
        startup_kills=0.0,
        min_delay=0.0,
        max_delay=4.0,
        keep=False,
    )
    out = crash_trials.Trials()
    crash_trials.run_trials("aggregation", args, random.Random(5), out)
    v = out.verdicts["aggregation"]
    assert (out.kills, out.broker_kills) == (5, 1)
    assert v.windows > 0 and (v.lost, v.wrong, v.duplicates) == (0, 0, 0), v
    assert (v.errors_missing, v.errors_twice) == (0, 0) and v.errors_expected == 5


def test_an_attempt_committed_just_before_a_broker_kill_is_not_counted_as_committed(
    tmp_path: Path,
) -> None:
    # the local broker loses its last second of writes, commit markers included
    trace = tmp_path / "trace.log"
    trace.write_text(
        "100.0 apply 0 3\n"
        "100.1 changelog 0 3 early\n"
        "100.2 local-commit 0 3\n"
        "109.0 changelog 1 3 late\n"
        "109.5 changelog 0 4\n"
    )
    assert crash_trials.committed_attempts(trace) == {"early", "late"}
    assert crash_trials.committed_attempts(trace, [110.0]) == {"early"}
    assert crash_trials.committed_attempts(trace, [100.05, 120.0]) == {"early", "late"}
