"""The join's state-task plan: how a batch's rows of both inputs reach the operator."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import numpy as np
import orjson
import pytest
from joinkit import Ev, rows_oracle

from window_operator.config import JoinJobConfig, parse_any_config
from window_operator.join.decoding import JoinRows
from window_operator.runtime.join_plan import JoinPlan
from window_operator.simulate import simulate

T0 = 1_795_560_000_000


@pytest.mark.parametrize("same_timestamp", [True, False])
def test_a_rows_self_join_takes_each_record_left_then_right_as_simulate_does(
    same_timestamp: bool,
) -> None:
    """Both inputs read one topic: a record reaches the left input, then the right,
    before the next record. Before, records of one Kafka timestamp (``produce`` writes a
    file within a few milliseconds) reached the left input all first, so ROWS 1 paired
    differently on Kafka than in ``simulate`` (a review)."""
    config = parse_any_config(
        {
            "job": "self",
            "join": {
                "left": {"name": "L", "topic": "t", "timestamp": "ts"},
                "right": {"name": "R", "topic": "t", "timestamp": "ts"},
                "on": ["k"],
                "rows": 1,
            },
        },
        base_dir=Path("."),
    )
    assert isinstance(config, JoinJobConfig)
    plan = JoinPlan.of(config)
    evs = [Ev(0, 1, "", T0 + i, i) for i in range(3)]
    recs = [orjson.dumps(e.record) for e in evs]
    arrival = [T0 + 5] * 3 if same_timestamp else [T0 + 5 + i for i in range(3)]
    rows = {
        side: JoinRows.from_columns(
            [1] * 3, [e.ts for e in evs], recs, source=side, offset=[0, 1, 2], wall_ms=arrival
        )
        for side in (0, 1)
    }
    parts = {side: [plan.to_arrow(r, np.arange(3))] for side, r in rows.items()}
    with tempfile.TemporaryDirectory() as tmp:
        op = plan.runtime.open_task(Path(tmp))
        for batch in plan.arrange(parts):
            op.add_batch(batch)
        op.timeout(2**62)
        pairs = [(r.left, r.right) for r in op.get_result() if r.left and r.right]
        on_kafka = sorted((left["n"], right["n"]) for left, right in pairs)
        op.close()
        path = Path(tmp) / "in.jsonl"
        path.write_bytes(b"".join(orjson.dumps({"source": "L", **e.record}) + b"\n" for e in evs))
        out = io.BytesIO()
        simulate(plan.runtime, path, out)
    simulated = sorted(
        (r["left"]["n"], r["right"]["n"]) for r in map(orjson.loads, out.getvalue().splitlines())
    )
    each_twice = [Ev(side, e.k, e.k2, e.ts, e.n) for e in evs for side in (0, 1)]
    expected = sorted(p[1:] for p in rows_oracle(each_twice, ["k"], 1).elements())
    assert on_kafka == simulated == expected
