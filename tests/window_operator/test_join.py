"""The windowed join on real RocksDB: the seed's Orders/Shipments examples, properties
against a nested-loop join, outer joins with retractions, replays, restore, idle inputs
and ``simulate`` end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stores.rocks import ColumnFamily
from window_operator.config import ConfigError, JoinJobConfig, load_any_config, parse_any_config
from window_operator.join import (
    JoinKind,
    JoinOperator,
    JoinResult,
    JoinRows,
    JoinRuntime,
    StoreLayout,
    UnknownSourceError,
    build_join_runtime,
    message_position,
)
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.fixture
def open_join(tmp_path: Path) -> Iterator[Callable[..., JoinOperator]]:
    """Open join operators under tmp_path (closed at teardown); same name = same state."""
    opened: list[JoinOperator] = []

    def _open(runtime: JoinRuntime, name: str = "a", **options: int) -> JoinOperator:
        op = runtime.open_task(tmp_path / name, **options)
        opened.append(op)
        return op

    yield _open
    for op in opened:
        op.close()


# ---------------------------------------------------------------------------------------
# The seed's Orders / Shipments example
# ---------------------------------------------------------------------------------------

# Orders (left) and Shipments (right), in wall-clock arrival order. Orders are taken
# first at equal wall clocks ("the join operator always takes Orders output first").
#
#   wall     input      offset  id  value/cost  time
#   9:00:00  Orders     1       1   value 0     8:59:10
#   9:00:00  Shipments  1000    3   cost 0      9:00:10
#   9:00:10  Shipments  1001    1   cost 2      9:00:10
#   9:00:59  Orders     2       3   value 5     9:00:00
#   9:01:01  Shipments  1002    1   cost 3      9:01:10
#   9:01:01  Shipments  1003    9   cost 1      9:01:20
#   9:02:01  Orders     3       9   value 9     8:59:30   <- late, still joins
SAMPLE = ROOT / "config" / "samples" / "orders-shipments.jsonl"
#: The rows (id, value, cost) the seed expects, by the wall clock they are known at.
EXPECTED_BY = [
    ("9:00:59", {(3, 5, 0), (1, 0, 2)}),
    ("9:01:59", {(1, 0, 3)}),
    ("9:02:59", {(9, 9, 1)}),
]


def hms(text: str) -> int:
    h, m, s = map(int, text.split(":"))
    return int(datetime(2024, 1, 1, h, m, s, tzinfo=UTC).timestamp() * 1000)


def sample_lines() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in SAMPLE.read_bytes().splitlines()]


def seed_rows(results: Sequence[JoinResult]) -> Counter[tuple[int, int, int]]:
    assert all(r.kind is JoinKind.MATCH for r in results)
    out: Counter[tuple[int, int, int]] = Counter()
    for r in results:
        assert r.left is not None and r.right is not None
        out[(r.key["id"], r.left["value"], r.right["cost"])] += 1
    return out


def orders_runtime(**join: Any) -> JoinRuntime:
    config = load_any_config(ROOT / "config" / "orders-shipments.yaml")
    assert isinstance(config, JoinJobConfig)
    if join:
        data = config.model_dump()
        data["join"] = {**data["join"], "range": None, **join}
        config = JoinJobConfig.model_validate(data)
    return build_join_runtime(config)


def run_seed_example(op: JoinOperator, one_by_one: bool) -> None:
    """Feed the sample by wall clock; check each result row appears when the seed says."""
    lines = sample_lines()
    got: Counter[tuple[int, int, int]] = Counter()
    pending = list(lines)
    for deadline, rows in EXPECTED_BY:
        arrived = [x for x in pending if x["wall_ms"] <= hms(deadline)]
        pending = pending[len(arrived) :]
        # consecutive lines of one input form a batch
        runs: list[list[dict[str, Any]]] = []
        for x in arrived:
            if runs and runs[-1][0]["source"] == x["source"]:
                runs[-1].append(x)
            else:
                runs.append([x])
        for run in runs:
            recs = [{k: v for k, v in x.items() if k not in ("source", "offset")} for x in run]
            if one_by_one:
                for x, rec in zip(run, recs, strict=True):
                    wall = rec.pop("wall_ms")
                    op.add_message(x["source"], rec, offset=x["offset"], wall_ms=wall)
            else:
                walls = [rec.pop("wall_ms") for rec in recs]
                op.add_batch(
                    run[0]["source"], recs, offsets=[x["offset"] for x in run], wall_ms=walls
                )
        new = seed_rows(op.get_result())
        assert new == Counter(rows), deadline
        got += new
    op.timeout(END_OF_TIME)
    assert op.get_result() == [] and op.get_errors() == []
    assert got == Counter({(3, 5, 0): 1, (1, 0, 2): 1, (1, 0, 3): 1, (9, 9, 1): 1})


@pytest.mark.parametrize("one_by_one", [False, True])
@pytest.mark.parametrize("store", ["auto", "ts_offset", "ts_fields_offset", "fields_ts_offset"])
def test_orders_shipments_time_range_example(
    open_join: Callable[..., JoinOperator], store: str, one_by_one: bool
) -> None:
    # RANGE '2' min PRECEDING: 0 <= shipment.time - order.time <= 2 min. Order 1 (8:59:10)
    # pairs with shipment 1002 (9:01:10) at exactly 2 minutes: the bound is inclusive.
    runtime = orders_runtime(range="2m", store=store)
    # cache_max_rows=0 sends every lookup after a flush to RocksDB through the layout
    op = open_join(runtime, cache_max_rows=0)
    run_seed_example(op, one_by_one)
    assert op.offsets == {("orders", 0): 3, ("shipments", 0): 1003}


def test_auto_layout_follows_the_seed_matrix() -> None:
    assert orders_runtime(range="2m").spec.layout is StoreLayout.FIELDS_TS_OFFSET
    assert orders_runtime(range="30s").spec.layout is StoreLayout.TS_FIELDS_OFFSET
    assert orders_runtime(range="30s", on=[]).spec.layout is StoreLayout.TS_OFFSET
    assert orders_runtime(rows=3).spec.layout is StoreLayout.FIELDS_OFFSET
    with pytest.raises(ConfigError, match="join.store"):
        orders_runtime(rows=3, store="ts_offset")


@pytest.mark.parametrize("one_by_one", [False, True])
def test_orders_shipments_rows_example(
    open_join: Callable[..., JoinOperator], one_by_one: bool
) -> None:
    # ROWS 3 PRECEDING over Orders: a shipment joins the 3 latest orders of its id that
    # arrived before it; an order arriving later joins the stored shipments of its id
    # (Shipments' default window is unbounded), so late order 3 still pairs with 1003.
    op = open_join(orders_runtime(rows=3))
    run_seed_example(op, one_by_one)


def test_rows_window_keeps_only_the_n_latest_left_rows(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"rows": 2}), cache_max_rows=0)
    op.add_batch("L", [{"k": 1, "ts": t * S, "n": t} for t in range(5)])
    op.flush()
    op.add_message("R", {"k": 1, "ts": 10 * S, "n": 100})
    assert sorted(r.left["n"] for r in op.get_result() if r.left) == [3, 4]
    # a later left row still joins every stored right row of its key
    op.add_message("L", {"k": 1, "ts": 0, "n": 5})
    assert [(r.left, r.right) for r in op.get_result()] == [
        ({"k": 1, "ts": 0, "n": 5}, {"k": 1, "ts": 10 * S, "n": 100})
    ]
    assert len(op.get_messages("L", -(2**62), 0, 2**62, 2**62)) == 2  # trimmed to 2


def test_rows_join_partners_expire_with_retention(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"rows": 3}, retention="1m"))
    op.add_message("L", {"k": 1, "ts": 0, "n": 0})
    op.add_message("L", {"k": 9, "ts": 200 * S, "n": 1})
    op.add_message("R", {"k": 9, "ts": 200 * S, "n": 2})
    assert op.watermark == 200 * S and len(op.get_result()) == 1
    # left row 0 is 200 s behind the watermark: past retention, even before a flush
    op.add_message("R", {"k": 1, "ts": 190 * S, "n": 3})
    assert op.get_result() == []
    op.flush()
    assert [m.record["n"] for m in op.get_messages("L", -(2**62), 0, 2**62, 2**62)] == [1]


# ---------------------------------------------------------------------------------------
# Properties against a nested-loop join
# ---------------------------------------------------------------------------------------


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

    def key(self, on: Sequence[str]) -> Any:
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
    for j, batch in enumerate(batches):
        source = "LR"[batch[0].side]
        if sc.one_by_one:
            for e in batch:
                op.add_message(source, e.record, partition=e.partition, offset=e.offset)
        elif sc.as_rows:
            rows = JoinRows.from_columns(
                [e.key(on) if on else () for e in batch],
                [e.ts for e in batch],
                [orjson.dumps(e.record) for e in batch],
                partition=[e.partition for e in batch],
                offset=[e.offset for e in batch],
            )
            op.add_batch(source, rows)
        else:
            op.add_batch(
                source,
                [e.record for e in batch],
                partitions=[e.partition for e in batch],
                offsets=[e.offset for e in batch],
            )
        if flushes and sc.flushes[j % len(sc.flushes)]:
            op.flush()


def run_join(runtime: JoinRuntime, sc: Scenario, **options: int) -> list[JoinResult]:
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


@PROPERTY
@given(
    sc=scenarios(),
    cond=CONDITIONS,
    on=ONS,
    store=STORES,
    lateness=st.sampled_from(["0s", "5s"]),
    small_cache=st.booleans(),
    key_limit=st.sampled_from([0, 100_000]),
)
def test_inner_join_equals_nested_loop(
    sc: Scenario,
    cond: dict[str, Any],
    on: list[str],
    store: str,
    lateness: str,
    small_cache: bool,
    key_limit: int,
) -> None:
    # small_cache: every lookup after a flush reads RocksDB through the store layout;
    # key_limit 0: join keys are forgotten and re-interned at every flush.
    runtime = join_runtime({**cond, "on": on, "store": store}, lateness=lateness)
    options = {"cache_max_rows": 0} if small_cache else {}
    results = run_join(runtime, sc, key_limit=key_limit, **options)
    lo, hi = runtime.spec.lo, runtime.spec.hi
    got = outcomes(results)
    assert got == nested_loop(sc.arrival, on, lo, hi)
    assert all(n == 1 for n in got.values())  # no pair twice
    assert all(r.kind is JoinKind.MATCH for r in results)


@PROPERTY
@given(sc=scenarios(), cond=CONDITIONS, on=ONS, kind=st.sampled_from(["left", "full"]))
def test_outer_join_equals_nested_loop_after_retractions(
    sc: Scenario, cond: dict[str, Any], on: list[str], kind: str
) -> None:
    runtime = join_runtime({**cond, "on": on, "kind": kind}, lateness="2s")
    results = run_join(runtime, sc, cache_max_rows=0, key_limit=0)
    lo, hi = runtime.spec.lo, runtime.spec.hi
    assert outcomes(results) == nested_loop(sc.arrival, on, lo, hi, kind)
    # a row is emitted unmatched at most once
    unmatched = Counter(
        (r.kind, str(r.left), str(r.right))
        for r in results
        if r.kind in (JoinKind.LEFT_UNMATCHED, JoinKind.RIGHT_UNMATCHED)
    )
    assert all(n == 1 for n in unmatched.values())


@PROPERTY
@given(sc=scenarios(), n_rows=st.integers(1, 3), on=ONS)
def test_rows_join_equals_arrival_order_oracle(sc: Scenario, n_rows: int, on: list[str]) -> None:
    runtime = join_runtime({"rows": n_rows, "on": on})
    assert outcomes(run_join(runtime, sc, key_limit=0)) == rows_oracle(sc.arrival, on, n_rows)


@PROPERTY
@given(
    sc=scenarios(max_ts=200),
    cond=CONDITIONS,
    kind=st.sampled_from(["inner", "left", "full"]),
    store=STORES,
)
def test_retention_matches_nested_loop_over_accepted_messages(
    sc: Scenario, cond: dict[str, Any], kind: str, store: str
) -> None:
    # A short retention rejects old messages and expires stored ones (flush), yet
    # every pair of accepted messages is still found: expiry only removes messages
    # that no accepted message can match.
    runtime = join_runtime({**cond, "kind": kind, "store": store}, retention="20s")
    with tempfile.TemporaryDirectory() as tmp:
        op = runtime.open_task(Path(tmp), cache_max_rows=0)
        feed(op, sc, ["k"], sc.batches())
        op.timeout(END_OF_TIME)
        errors = op.get_errors()
        results = op.get_result()
        op.close()
    assert all(e.code is ErrorCode.OUT_OF_RETENTION for e in errors)
    dropped = {orjson.loads(e.raw or b"")["n"] for e in errors}
    accepted = [e for e in sc.arrival if e.n not in dropped]
    expected = nested_loop(accepted, ["k"], runtime.spec.lo, runtime.spec.hi, kind)
    assert outcomes(results) == expected


# ---------------------------------------------------------------------------------------
# Replays and recovery
# ---------------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=max(1, EXAMPLES * 2 // 3))
@given(
    sc=scenarios(),
    cond=st.one_of(CONDITIONS, st.just({"rows": 2})),
    kind=st.sampled_from(["inner", "left", "full"]),
    crash_at=st.integers(0, 60),
    checkpoint_at=st.integers(0, 60),
)
def test_crash_and_restore_mid_stream_gives_the_same_results(
    sc: Scenario, cond: dict[str, Any], kind: str, crash_at: int, checkpoint_at: int
) -> None:
    # Results up to a checkpoint, plus the results after restoring from it and replaying
    # the whole input (earlier offsets are recognised as replays), equal an
    # uninterrupted run.
    kind = "inner" if "rows" in cond else kind
    runtime = join_runtime({**cond, "kind": kind}, lateness="2s")
    reference = outcomes(run_join(runtime, sc))
    batches = sc.batches()
    crash = crash_at % (len(batches) + 1)
    checkpoint = min(checkpoint_at % (len(batches) + 1), crash)
    with tempfile.TemporaryDirectory() as tmp:
        op = runtime.open_task(Path(tmp), cache_max_rows=0)
        feed(op, sc, ["k"], batches[:checkpoint])
        kept = op.get_result()
        op.flush()
        # no flush here: a flush would be a checkpoint, after which results are delivered
        feed(op, sc, ["k"], batches[checkpoint:crash], flushes=False)
        op.get_result()  # lost with the crash
        op.store.close()  # no flush: the writes after the checkpoint are gone
        op = runtime.open_task(Path(tmp))
        feed(op, sc, ["k"], batches)
        op.timeout(END_OF_TIME)
        assert op.get_errors() == []
        after = op.get_result()
        op.close()
    assert outcomes(kept + after) == reference


def test_replays_change_nothing(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": 10 * S, "kind": "full"}))
    lefts = [{"k": 1, "ts": t * S, "n": t} for t in range(5)]
    rights = [{"k": 1, "ts": t * S + 500, "n": 10 + t} for t in range(5)]
    op.add_batch("L", lefts, offsets=list(range(5)))
    op.add_batch("R", rights, offsets=list(range(5)))
    first = op.get_result()
    op.flush()
    stats = op.add_batch("L", lefts, offsets=list(range(5)))
    assert (stats.applied, stats.replayed) == (0, 5)
    stats = op.add_batch("R", rights[:3], offsets=list(range(3)))
    assert stats.replayed == 3
    op.add_message("L", {"k": 1, "ts": 0, "n": 99}, offset=2)  # an old offset: a replay
    assert op.get_result() == [] and op.get_errors() == []
    assert len(first) == 15  # each left row pairs with the rights 0-10 s after it


def test_restore_keeps_outer_state_and_offsets(
    open_join: Callable[..., JoinOperator],
) -> None:
    runtime = join_runtime({"range": 10 * S, "kind": "left"})
    op = open_join(runtime, "s")
    op.add_batch("L", [{"k": 1, "ts": 0, "n": 0}, {"k": 2, "ts": 0, "n": 1}])
    op.add_batch("R", [{"k": 3, "ts": 60 * S, "n": 2}])
    assert op.get_result() == []  # the left input holds the watermark at 0
    op.add_batch("L", [{"k": 4, "ts": 60 * S, "n": 5}])
    # the watermark (60 s) is past both left rows' last chance (10 s): emitted unmatched
    assert [(r.kind, r.left and r.left["n"]) for r in op.get_result()] == [
        (JoinKind.LEFT_UNMATCHED, 0),
        (JoinKind.LEFT_UNMATCHED, 1),
    ]
    op.close()
    op = open_join(runtime, "s")
    assert op.watermark == 60 * S and op.offsets == {("L", 0): 2, ("R", 0): 0}
    op.add_message("R", {"k": 1, "ts": 5 * S, "n": 3})  # late, matches row 0
    assert [
        (r.kind, r.left and r.left["n"], r.right and r.right["n"]) for r in op.get_result()
    ] == [
        (JoinKind.RETRACT, 0, None),
        (JoinKind.MATCH, 0, 3),
    ]
    op.add_message("R", {"k": 1, "ts": 6 * S, "n": 4})  # a second match: no second retract
    assert [r.kind for r in op.get_result()] == [JoinKind.MATCH]


# ---------------------------------------------------------------------------------------
# Watermark, idle inputs, retention, errors
# ---------------------------------------------------------------------------------------


def test_watermark_is_the_min_over_inputs_and_partitions(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"range": S}, lateness="1s"))
    op.add_message("L", {"k": 1, "ts": 100 * S, "n": 0})
    assert op.watermark == NO_WATERMARK  # the right input has not spoken yet
    op.add_message("R", {"k": 1, "ts": 50 * S, "n": 1})
    assert op.watermark == 49 * S
    op.add_message("R", {"k": 1, "ts": 70 * S, "n": 2}, partition=1)
    op.add_message("R", {"k": 1, "ts": 90 * S, "n": 3}, partition=0)
    assert op.watermark == 69 * S  # partition 1 of R is the slowest
    op.add_message("R", {"k": 1, "ts": 10 * S, "n": 4}, partition=1)
    assert op.watermark == 69 * S  # never decreases


@pytest.mark.parametrize("idle", [None, "5s"])
def test_idle_input_stops_holding_the_watermark(
    open_join: Callable[..., JoinOperator], idle: str | None
) -> None:
    # Left join; the right input is silent. With an idle timeout the left rows are
    # emitted unmatched once the wall clock shows R idle; a late right row then
    # matches one of them: MATCH plus RETRACT.
    op = open_join(join_runtime({"range": 10 * S, "kind": "left"}, idle=idle))
    op.add_message("L", {"k": 1, "ts": 1 * S, "n": 0}, wall_ms=1 * S)
    op.timeout(4 * S)
    assert op.get_result() == []
    op.add_message("L", {"k": 2, "ts": 30 * S, "n": 1}, wall_ms=30 * S)
    op.timeout(31 * S)
    got = [(r.kind, r.left and r.left["n"]) for r in op.get_result()]
    if idle is None:
        assert got == [] and op.watermark == NO_WATERMARK
        return
    assert got == [(JoinKind.LEFT_UNMATCHED, 0)] and op.watermark == 30 * S
    op.add_message("R", {"k": 1, "ts": 5 * S, "n": 2}, wall_ms=32 * S)
    got = [(r.kind, r.left and r.left["n"], r.right and r.right["n"]) for r in op.get_result()]
    assert got == [(JoinKind.RETRACT, 0, None), (JoinKind.MATCH, 0, 2)]


def test_idle_partition_releases_its_input(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": S}, idle="5s"))
    op.add_message("L", {"k": 1, "ts": 10 * S, "n": 0}, partition=0, wall_ms=10 * S)
    op.add_message("L", {"k": 1, "ts": 10 * S, "n": 1}, partition=1, wall_ms=10 * S)
    op.add_message("R", {"k": 1, "ts": 50 * S, "n": 2}, wall_ms=11 * S)
    assert op.watermark == 10 * S
    op.add_message("L", {"k": 1, "ts": 40 * S, "n": 3}, partition=0, wall_ms=12 * S)
    assert op.watermark == 10 * S  # L partition 1 is behind and not idle yet
    op.timeout(16 * S)
    assert op.watermark == 40 * S  # L partition 1 idle for 6 s


def test_retention_rejects_and_expires(open_join: Callable[..., JoinOperator]) -> None:
    runtime = join_runtime({"range": 10 * S}, retention="1m")
    op = open_join(runtime, cache_max_rows=0)
    op.add_batch("L", [{"k": 1, "ts": 0, "n": 0}, {"k": 1, "ts": 100 * S, "n": 1}])
    op.add_batch("R", [{"k": 9, "ts": 100 * S, "n": 2}])
    op.flush()
    # left row 0 can match rights up to 10 s; rights are accepted down to 100 s - 60 s
    assert [m.record["n"] for m in op.get_messages("L", -(2**62), 0, 2**62, 2**62)] == [1]
    stored = list(op.store.scan(ColumnFamily.MESSAGES, b"L", b"M"))
    assert len(stored) == 1
    stats = op.add_message("R", {"k": 1, "ts": 30 * S, "n": 3}, offset=7)
    assert stats.rejected == 1 and op.get_result() == []
    (err,) = op.get_errors()
    assert err.code is ErrorCode.OUT_OF_RETENTION and (err.partition, err.offset) == (0, 7)
    assert err.topic == "R" and orjson.loads(err.raw or b"")["n"] == 3
    op.add_message("R", {"k": 1, "ts": 40 * S, "n": 4})  # accepted; row 0 is gone
    assert op.get_result() == []


def test_bad_records_become_errors_once(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": S, "on": ["k", "k2"]}))
    recs = [
        {"k": 1, "ts": 0},  # k2 missing
        {"k": None, "k2": "x", "ts": 0},
        {"k": 1.5, "k2": "x", "ts": 0},
        {"k": True, "k2": "x", "ts": 0},
        {"k": 1, "k2": "x"},
        {"k": 1, "k2": "x", "ts": 0, "n": 1},  # good
    ]
    stats = op.add_batch("L", recs, offsets=list(range(6)))
    assert (stats.applied, stats.rejected) == (1, 5)
    errors = op.get_errors()
    assert [e.code for e in errors] == [
        ErrorCode.MISSING_FIELD,
        ErrorCode.MISSING_FIELD,
        ErrorCode.WRONG_TYPE,
        ErrorCode.WRONG_TYPE,
        ErrorCode.MISSING_TIMESTAMP,
    ]
    assert [e.offset for e in errors] == [0, 1, 2, 3, 4]
    op.add_batch("L", recs, offsets=list(range(6)))  # a replay reports nothing again
    assert op.get_errors() == []
    with pytest.raises(UnknownSourceError, match="'X'"):
        op.add_message("X", {"k": 1})


def test_get_windows_and_get_messages(open_join: Callable[..., JoinOperator]) -> None:
    op = open_join(join_runtime({"range": 30 * S}), cache_max_rows=0)
    op.add_batch("L", [{"k": k, "ts": t * S, "n": t} for t, k in [(5, 1), (10, 2), (40, 1)]])
    op.add_batch("R", [{"k": 1, "ts": 35 * S, "n": 9}], partition=2, offsets=[17])
    op.flush()
    windows = op.get_windows(0, 60 * S)
    assert [(w.source, w.start, w.end, w.count) for w in windows] == [
        ("L", 0, 30 * S, 2),
        ("L", 30 * S, 60 * S, 1),
        ("R", 30 * S, 60 * S, 1),
    ]
    assert windows[2].first_position == message_position(2, 17)
    keyed = op.get_windows(1, 0, 60 * S)
    assert [(w.source, w.key, w.start, w.count) for w in keyed] == [
        ("L", (1,), 0, 1),
        ("L", (1,), 30 * S, 1),
        ("R", (1,), 30 * S, 1),
    ]
    # (ts, position) bounds are inclusive; the row at (40 s, offset 2) is past (40 s, 0)
    msgs = op.get_messages("L", 5 * S, 0, 40 * S, 0, join_keys=[2, 1])
    assert [(m.key, m.ts, m.record["n"]) for m in msgs] == [((2,), 10 * S, 10), ((1,), 5 * S, 5)]
    assert [m.record["n"] for m in op.get_messages("L", 5 * S, 0, 40 * S, 2)] == [5, 10, 40]
    (shipment,) = op.get_messages("R", 0, 0, 2**61, 2**62)
    assert (shipment.partition, shipment.offset, shipment.source) == (2, 17, "R")


# ---------------------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "window_operator", *args],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
    )


def test_simulate_orders_shipments_end_to_end(tmp_path: Path) -> None:
    outs = []
    for batch_size in ("10000", "10000", "1"):
        proc = cli(
            "simulate",
            "--config", "config/orders-shipments.yaml",
            "--input", "config/samples/orders-shipments.jsonl",
            "--batch-size", batch_size,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]  # byte-identical
    rows = [orjson.loads(line) for line in outs[0].splitlines()]
    assert [set(r) for r in rows] == [{"kind", "key", "left", "right", "left_ts", "right_ts"}] * 4
    assert [(r["key"]["id"], r["left"]["value"], r["right"]["cost"]) for r in rows] == [
        (1, 0, 2),
        (3, 5, 0),
        (1, 0, 3),
        (9, 9, 1),
    ]
    assert rows[3]["left_ts"] == hms("8:59:30") and rows[3]["right_ts"] == hms("9:01:20")
    assert sorted(outs[2].splitlines()) == sorted(outs[0].splitlines())
    assert b"4 join results" in proc.stderr


def test_simulate_join_errors_and_outer_rows(tmp_path: Path) -> None:
    job = tmp_path / "join.yaml"
    job.write_text(
        "job: j\njoin:\n"
        "  left: {name: clicks, timestamp: ts}\n"
        "  right: {name: views, timestamp: ts}\n"
        '  "on": [user]\n'
        "  kind: full\n"
        "  between: [-5s, 5s]\n"
    )
    lines = [
        {"source": "clicks", "user": "u1", "ts": 1000},
        {"source": "views", "user": "u1", "ts": 3000},
        {"source": "views", "user": "u2", "ts": 9000, "offset": 4},
        {"source": "views", "user": "u2", "ts": 9000, "offset": 4},  # replay
        {"source": "mystery", "user": "u1", "ts": 1000},
        {"source": "clicks", "ts": 1000},
        {"source": "clicks", "user": "u3", "ts": 60000},
    ]
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\nnot json\n")
    out, errs = tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    proc = cli(
        "simulate", "--config", str(job), "--input", str(events),
        "--output", str(out), "--errors", str(errs),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert [
        (r["kind"], r["left"] and r["left"]["user"], r["right"] and r["right"]["user"]) for r in got
    ] == [
        ("MATCH", "u1", "u1"),
        # both emitted when the input ends (the watermark never passed 9 s before)
        ("LEFT_UNMATCHED", "u3", None),
        ("RIGHT_UNMATCHED", None, "u2"),
    ]
    codes = sorted(orjson.loads(x)["code"] for x in errs.read_bytes().splitlines())
    assert codes == ["BAD_JSON", "MISSING_FIELD", "UNKNOWN_SOURCE"]
    assert b"1 replayed" in proc.stderr


def test_join_output_record_shape() -> None:
    runtime = join_runtime({"range": S, "kind": "left"})
    with tempfile.TemporaryDirectory() as tmp:
        op = runtime.open_task(Path(tmp))
        op.add_message("L", {"k": "a", "ts": 0, "n": 0})
        op.add_message("R", {"k": "b", "ts": 10 * S, "n": 1})
        op.timeout(END_OF_TIME)
        (batch,) = op.take_result_batches()
        op.close()
    assert batch.to_json_lines() == (
        b'{"kind":"LEFT_UNMATCHED","key":{"k":"a"},"left":{"k":"a","ts":0,"n":0},'
        b'"right":null,"left_ts":0,"right_ts":null}\n'
    )
    assert batch.to_results()[0].to_dict()["right"] is None
