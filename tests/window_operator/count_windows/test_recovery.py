"""Snapshot -> restore in the middle of a stream gives the same results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from countkit import open_op, runtime

from window_operator.policies import END_OF_TIME
from window_operator.results import WindowResult

RECOVERY_EVENTS = [
    {"k": k, "ts": i, "v": (i * 7) % 11} for i, k in enumerate("abaabbbaababaaabbaba")
]


# The offsets engine is the time-window aggregator, which does not persist which frames
# changed since the last EARLY result: it is checked without EARLY results.
@pytest.mark.parametrize(
    ("window", "emit"),
    [
        ({"type": "count", "size": 3}, {"early": "3s"}),
        ({"type": "count", "size": 4, "step": 2}, {"early": "3s"}),
        ({"type": "offsets", "size": 6, "step": 2}, {}),
    ],
)
def test_snapshot_restore_mid_stream_gives_the_same_results(
    tmp_path: Path, window: dict[str, Any], emit: dict[str, Any]
) -> None:
    rt = runtime(window, emit=emit)

    def run(split: int | None) -> list[list[tuple[Any, ...]]]:
        d = tmp_path / f"split-{split}"
        agg = open_op(rt, d)
        out: list[list[tuple[Any, ...]]] = []
        for i, e in enumerate(RECOVERY_EVENTS):
            if i == split:
                agg.close()  # snapshot ...
                agg = open_op(rt, d)  # ... and restore in the middle
            agg.add_message(e, wall_ms=i * 1000)
            agg.timeout(i * 1000)
            out.append(step_output(agg.get_result()))
        agg.timeout(END_OF_TIME)
        out.append(step_output(agg.get_result()))
        agg.close()
        return out

    reference = run(None)
    kinds = {kind for step in reference for kind, *_ in step}
    assert kinds == ({"EARLY", "ON_TIME"} if emit else {"ON_TIME"})
    for split in range(1, len(RECOVERY_EVENTS), 4):
        assert run(split) == reference, f"restore after {split} events"


def step_output(results: Sequence[WindowResult]) -> list[tuple[Any, ...]]:
    """The results of one call; their order across windows is not part of the contract."""
    return sorted(
        (r.kind.value, r.key, r.window_start, r.window_end, r.update_seq, orjson.dumps(r.values))
        for r in results
    )
