"""Helpers of the join tests: small join jobs, random scenarios, how to feed them, and
the oracles (a nested-loop join and an arrival-order rows join)."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from window_operator.config import JoinJobConfig, load_any_config, parse_any_config
from window_operator.join import (
    JoinKey,
    JoinKind,
    JoinOperator,
    JoinResult,
    JoinRows,
    JoinRuntime,
    build_join_runtime,
)
from window_operator.policies import END_OF_TIME

ROOT = Path(__file__).resolve().parents[1]
S = 1000
M = 60 * S
#: Examples per property test; JOIN_EXAMPLES=500 for a deeper run.
EXAMPLES = int(os.environ.get("JOIN_EXAMPLES", "30"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def join_runtime(
    join: dict[str, Any],
    *,
    lateness: str = "0s",
    retention: str = "1d",
    idle: str | None = None,
) -> JoinRuntime:
    """A join of inputs L and R (records ``{"k", "k2", "ts", "n"}``) with ``join`` overrides."""
    cfg = {
        "job": "join-test",
        "join": {
            "left": {"name": "L", "timestamp": "ts"},
            "right": {"name": "R", "timestamp": "ts"},
            "on": ["k"],
            **join,
        },
        "watermark": {"allowed_lateness": lateness, "idle_timeout": idle},
        "retention": {"time": retention},
    }
    config = parse_any_config(cfg, base_dir=Path("."))
    assert isinstance(config, JoinJobConfig)
    return build_join_runtime(config)


def hms(text: str) -> int:
    """Milliseconds of ``h:mm:ss`` on 2024-01-01 (UTC), as in the seed's example."""
    h, m, s = map(int, text.split(":"))
    return int(datetime(2024, 1, 1, h, m, s, tzinfo=UTC).timestamp() * 1000)


def orders_runtime(**join: Any) -> JoinRuntime:
    """The seed's Orders/Shipments job (``config/orders-shipments.yaml``), ``join`` changed."""
    config = load_any_config(ROOT / "config" / "orders-shipments.yaml")
    assert isinstance(config, JoinJobConfig)
    if join:
        data = config.model_dump()
        data["join"] = {**data["join"], "range": None, **join}
        config = JoinJobConfig.model_validate(data)
    return build_join_runtime(config)


@dataclass(frozen=True)
class Ev:
    side: int
    k: int | str
    k2: str
    ts: int
    n: int
    partition: int = 0
    offset: int = 0

    @property
    def record(self) -> dict[str, Any]:
        return {"k": self.k, "k2": self.k2, "ts": self.ts, "n": self.n}

    def key(self, on: Sequence[str]) -> JoinKey:
        values = tuple(self.record[f] for f in on)
        return values[0] if len(values) == 1 else values


Outcome = tuple[str, int | None, int | None]


def nested_loop(
    evs: Sequence[Ev], on: Sequence[str], lo: int, hi: int, kind: str = "inner"
) -> Counter[Outcome]:
    out: Counter[Outcome] = Counter()
    lefts = [e for e in evs if e.side == 0]
    rights = [e for e in evs if e.side == 1]
    matched: set[int] = set()
    for left in lefts:
        for right in rights:
            if left.key(on) == right.key(on) and lo <= right.ts - left.ts <= hi:
                out[("MATCH", left.n, right.n)] += 1
                matched |= {left.n, right.n}
    if kind in ("left", "full"):
        out.update(("LEFT_UNMATCHED", e.n, None) for e in lefts if e.n not in matched)
    if kind == "full":
        out.update(("RIGHT_UNMATCHED", None, e.n) for e in rights if e.n not in matched)
    return out


def rows_oracle(arrival: Sequence[Ev], on: Sequence[str], n_rows: int) -> Counter[Outcome]:
    """ROWS n PRECEDING in arrival order: right joins the n latest lefts, left joins all."""
    out: Counter[Outcome] = Counter()
    seen: list[Ev] = []
    for e in arrival:
        same = [x for x in seen if x.key(on) == e.key(on)]
        if e.side == 1:
            for x in [x for x in same if x.side == 0][-n_rows:]:
                out[("MATCH", x.n, e.n)] += 1
        else:
            for x in [x for x in same if x.side == 1]:
                out[("MATCH", e.n, x.n)] += 1
        seen.append(e)
    return out


def outcomes(results: Sequence[JoinResult]) -> Counter[Outcome]:
    """Results as a multiset, with every RETRACT cancelling one equal unmatched record."""
    out: Counter[Outcome] = Counter()
    for r in results:
        ln = None if r.left is None else r.left["n"]
        rn = None if r.right is None else r.right["n"]
        if r.kind is JoinKind.RETRACT:
            kind = "LEFT_UNMATCHED" if rn is None else "RIGHT_UNMATCHED"
            assert out[(kind, ln, rn)] > 0, f"retracts a record never emitted: {r}"
            out[(kind, ln, rn)] -= 1
        else:
            out[(r.kind.value, ln, rn)] += 1
    return +out


@dataclass(frozen=True)
class Scenario:
    """Events in arrival order, with per-(input, partition) offsets, and how to feed them."""

    arrival: list[Ev]
    cuts: list[bool]  # cut a batch after event i (batches never mix the inputs)
    flushes: list[bool]  # flush after batch j
    one_by_one: bool
    as_rows: bool

    def batches(self) -> list[list[Ev]]:
        out: list[list[Ev]] = []
        for i, e in enumerate(self.arrival):
            if out and out[-1][0].side == e.side and not self.cuts[i - 1]:
                out[-1].append(e)
            else:
                out.append([e])
        return out


@st.composite
def scenarios(draw: st.DrawFn, max_events: int = 30, max_ts: int = 40) -> Scenario:
    n = draw(st.integers(1, max_events))
    raw = [
        (
            draw(st.integers(0, 1)),
            draw(st.sampled_from([1, 2, "a"])),
            draw(st.sampled_from(["x", "y"])),
            draw(st.integers(0, max_ts)) * S,
            draw(st.integers(0, 1)),
        )
        for _ in range(n)
    ]
    order = draw(st.permutations(range(n)))
    next_offset: Counter[tuple[int, int]] = Counter()
    arrival = []
    for i in order:
        side, k, k2, ts, part = raw[i]
        arrival.append(Ev(side, k, k2, ts, i, part, next_offset[(side, part)]))
        next_offset[(side, part)] += 1
    cuts = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    flushes = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return Scenario(arrival, cuts, flushes, draw(st.booleans()), draw(st.booleans()))


def feed(
    op: JoinOperator,
    sc: Scenario,
    on: Sequence[str],
    batches: list[list[Ev]],
    *,
    flushes: bool = True,
) -> None:
    """Feed ``batches`` one message at a time, as decoded rows or as records."""
    for j, batch in enumerate(batches):
        side = batch[0].side
        source = "LR"[side]
        if sc.one_by_one:
            for e in batch:
                op.add_message(source, e.record, partition=e.partition, offset=e.offset)
        elif sc.as_rows:
            rows = JoinRows.from_columns(
                [e.key(on) if on else () for e in batch],
                [e.ts for e in batch],
                [orjson.dumps(e.record) for e in batch],
                source=side,
                partition=[e.partition for e in batch],
                offset=[e.offset for e in batch],
            )
            op.add_batch(rows)
        else:
            op.add_records(
                source,
                [e.record for e in batch],
                partitions=[e.partition for e in batch],
                offsets=[e.offset for e in batch],
            )
        if flushes and sc.flushes[j % len(sc.flushes)]:
            op.flush()


def run_join(runtime: JoinRuntime, sc: Scenario, **options: int) -> list[JoinResult]:
    """Every result of feeding ``sc`` to a fresh operator until the end of input."""
    on = runtime.spec.on
    with tempfile.TemporaryDirectory() as tmp:
        op = runtime.open_task(Path(tmp), **options)
        try:
            feed(op, sc, on, sc.batches())
            op.timeout(END_OF_TIME)
            assert op.get_errors() == []
            return op.get_result()
        finally:
            op.close()


CONDITIONS = st.one_of(
    st.sampled_from([0, 3, 10]).map(lambda d: {"range": d * S}),
    st.tuples(st.integers(-12, 8), st.integers(0, 12)).map(
        lambda b: {"between": [b[0] * S, (b[0] + b[1]) * S]}
    ),
)
STORES = st.sampled_from(["auto", "ts_offset", "ts_fields_offset", "fields_ts_offset"])
ONS = st.sampled_from([["k"], [], ["k", "k2"]])
