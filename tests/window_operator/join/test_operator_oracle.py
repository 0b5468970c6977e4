"""Properties of the join operator against a nested-loop join (and an arrival-order rows
join): inner and outer joins with retractions, retention, and crash/restore mid-stream."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from joinkit import (
    CONDITIONS,
    EXAMPLES,
    ONS,
    PROPERTY,
    STORES,
    Scenario,
    feed,
    join_runtime,
    nested_loop,
    outcomes,
    rows_oracle,
    run_join,
    scenarios,
)

from window_operator.join import JoinKind
from window_operator.policies import END_OF_TIME
from window_operator.results import ErrorCode


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


@PROPERTY
@given(sc=scenarios(max_ts=200), n_rows=st.integers(1, 3))
def test_rows_join_under_retention_does_not_depend_on_when_state_is_swept(
    sc: Scenario, n_rows: int
) -> None:
    # Flushes sweep expired messages; a right message still joins the n latest lefts of
    # its key by arrival that are within retention, however the sweeps were timed.
    runtime = join_runtime({"rows": n_rows}, retention="20s")

    def run(flushes: bool) -> tuple[Counter[Any], list[int | None]]:
        with tempfile.TemporaryDirectory() as tmp:
            op = runtime.open_task(Path(tmp), cache_max_rows=0)
            feed(op, sc, ["k"], sc.batches(), flushes=flushes)
            op.timeout(END_OF_TIME)
            rejected = sorted((e.offset for e in op.get_errors()), key=str)
            results = outcomes(op.get_result())
            op.close()
        return results, rejected

    assert run(flushes=True) == run(flushes=False)
