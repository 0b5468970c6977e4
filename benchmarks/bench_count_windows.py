"""Throughput of per-key count windows on one core (events/s through ``add_batch``).

Run ``python benchmarks/bench_count_windows.py`` (options: ``--events N`` default
1,000,000, ``--keys K`` default 10,000, ``--batch B`` default 100,000, ``--sample S``
keys checked against the oracle (default 500), ``--repeat R`` to keep the best of R
runs, ``--shapes`` a comma list of ``tumbling`` / ``hopping`` / ``early`` (default
all), ``--profile`` to cProfile the timed part, ``--help``). Exit status 1 when a result
check fails.

Both wall-clock and process CPU time are printed: on a shared machine the CPU figure
(events / CPU seconds of this process, RocksDB's threads included) is the steadier one.

Workload: :func:`window_operator.sample_data.click_stream` with ``N`` events over ``K``
keys (``/page/<i>``, Zipf-like skew), in arrival order. Two jobs, each computing
``count``, ``sum``, ``mean`` and ``max`` of ``latency_ms`` over each key's messages:
``tumbling`` is ``window: {type: count, size: 100}``, ``hopping`` is ``{type: count,
size: 100, step: 10}``, ``early`` is ``{type: count, size: 200, step: 2}`` with ``emit:
{early: 1s}`` (each batch's timeout emits EARLY results of every open window it
changed: up to 100 a key). The job is built with ``build_runtime(config).open_task(...)``.

Timed (the loop of ``bench_sessions.run_once``): micro-batches of
``EventBatch.from_columns`` (built before the clock starts) through ``add_batch``, after
each ``timeout(max ts)``, ``flush()`` (a RocksDB commit) and ``take_result_batches()``;
at the end ``timeout(END_OF_TIME)`` (the partial windows) and a last flush. Opening and
closing the store are not timed.

Check: every result is ON_TIME (or EARLY, which is not checked) and no window is
emitted twice; for a sample of keys the
windows must equal a plain-Python oracle that slices each key's message sequence into
``[s, s + size)`` for every ``s`` in steps of ``step`` (the last ones partial), with the
same count, sum, mean and max. The oracle uses no NumPy.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench_sessions import run_once

import window_operator
from window_operator.config import parse_config
from window_operator.events import EventBatch
from window_operator.job import build_runtime
from window_operator.results import ResultBatch
from window_operator.sample_data import ClickStream, click_stream

SHAPES: dict[str, tuple[int, int]] = {
    "tumbling": (100, 100),
    "hopping": (100, 10),
    "early": (200, 2),
}
#: the shapes that also emit EARLY results of every open window at each batch
EARLY = {"early"}
Window = tuple[str, int]


def job_doc(size: int, step: int, *, early: bool = False) -> dict[str, Any]:
    emit = {"emit": {"early": "1s"}} if early else {}
    return {
        **emit,
        "job": "bench-count-windows",
        "input": {"key": "page", "timestamp": "ts", "timestamp_unit": "ms"},
        "window": {"type": "count", "size": size, "step": step},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "sum", "op": "sum", "field": "latency_ms"},
            {"name": "mean", "op": "mean", "field": "latency_ms"},
            {"name": "max", "op": "max", "field": "latency_ms"},
        ],
    }


def oracle(cs: ClickStream, keys: set[str], size: int, step: int) -> dict[Window, dict[str, float]]:
    """Windows of the sampled keys, in plain Python: slices of each key's messages."""
    by_key: dict[str, list[float]] = {}
    lat = cs.latency_ms.tolist()
    for i, k in enumerate(cs.keys):
        if k in keys:
            by_key.setdefault(k, []).append(lat[i])
    out: dict[Window, dict[str, float]] = {}
    for k, seq in by_key.items():
        for s in range(0, len(seq), step):
            vals = seq[s : s + size]
            out[(k, s)] = {
                "n": len(vals),
                "sum": math.fsum(vals),
                "mean": math.fsum(vals) / len(vals),
                "max": max(vals),
            }
    return out


def check(
    batches: list[ResultBatch], keys: set[str], want: dict[Window, dict[str, float]], size: int
) -> tuple[str, Counter[str]]:
    """Compare the results of the sampled keys with the oracle."""
    kinds: Counter[str] = Counter()
    seen: set[Window] = set()
    got: dict[Window, dict[str, Any]] = {}
    for b in batches:
        kinds[b.kind.value] += len(b)
        if b.kind.value == "EARLY":
            continue
        starts = b.window_start.tolist()
        ends = b.window_end.tolist()
        for i, k in enumerate(b.keys):
            w = (k, starts[i])
            if w in seen:
                return f"FAILED: {w} emitted twice", kinds
            seen.add(w)
            if ends[i] != starts[i] + size:
                return f"FAILED: {w} ends at {ends[i]}", kinds
            if k in keys:
                got[w] = {n: col[i] for n, col in b.values.items()}
    if set(kinds) - {"EARLY"} != {"ON_TIME"}:
        return f"FAILED: result kinds {dict(kinds)}", kinds
    if got.keys() != want.keys():
        extra = sorted(got.keys() - want.keys())[:3]
        missing = sorted(want.keys() - got.keys())[:3]
        return f"FAILED: windows differ, unexpected {extra}, missing {missing}", kinds
    for w, exp in want.items():
        for name, value in exp.items():
            if not math.isclose(got[w][name], value, rel_tol=1e-9, abs_tol=1e-9):
                return f"FAILED: {w} {name} = {got[w][name]}, expected {value}", kinds
    return "ok", kinds


def bench_shape(
    name: str, cs: ClickStream, batches: list[EventBatch], args: argparse.Namespace
) -> str:
    """Run one shape ``--repeat`` times, print its figures; the check's verdict."""
    size, step = SHAPES[name]
    doc = job_doc(size, step, early=name in EARLY)
    runtime = build_runtime(parse_config(doc, base_dir=Path(".")))
    prof = cProfile.Profile() if args.profile else None
    runs = [run_once(runtime, batches, prof) for _ in range(max(1, args.repeat))]
    best = min(runs, key=lambda r: r.cpu)
    distinct = sorted(set(cs.keys))
    sample = set(random.Random(1).sample(distinct, min(args.sample, len(distinct))))
    want = oracle(cs, sample, size, step)
    verdict, kinds = "ok", Counter[str]()
    for run in runs:
        v, kinds = check(run.results, sample, want, size)
        if run.rejected:
            v = f"FAILED: {run.rejected} rejects"
        if v != "ok":
            verdict = v
    n = args.events
    print(
        f"count window {name} size {size} step {step}, {n:,} events, {len(distinct):,} keys, "
        f"add_batch of {args.batch:,} + timeout + flush (commit); best CPU of {len(runs)}"
    )
    print(
        f"  {n / best.wall:,.0f} events/s wall ({best.wall:.3f} s), "
        f"{n / best.cpu:,.0f} events/s CPU ({best.cpu:.3f} s)"
    )
    print(
        "  phases (wall / CPU s): "
        + ", ".join(f"{k} {w:.2f} / {c:.2f}" for k, (w, c) in best.phases.items())
    )
    print(f"  results {sum(kinds.values()):,}: {dict(kinds)}; rejected {best.rejected}")
    print(f"  check ({len(sample):,} keys, {len(want):,} windows vs oracle): {verdict}")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--events", type=int, default=1_000_000, help="events in the stream (default %(default)s)"
    )
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys (default %(default)s)")
    ap.add_argument(
        "--batch", type=int, default=100_000, help="events per add_batch (default %(default)s)"
    )
    ap.add_argument(
        "--sample",
        type=int,
        default=500,
        help="keys checked against the oracle (default %(default)s)",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs; the best is shown (default %(default)s)"
    )
    ap.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help="comma list of {} (default: all)".format(" / ".join(SHAPES)),
    )
    ap.add_argument("--profile", action="store_true", help="cProfile the timed part")
    args = ap.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown}; choose from {sorted(SHAPES)}")
    cs = click_stream(args.events, n_keys=args.keys, events_per_second=10_000.0)
    batches = [
        EventBatch.from_columns(
            cs.keys[i : i + args.batch],
            cs.ts[i : i + args.batch],
            numeric={"latency_ms": cs.latency_ms[i : i + args.batch]},
        )
        for i in range(0, args.events, args.batch)
    ]
    print(f"code: {Path(window_operator.__file__).parent}")
    verdicts = [bench_shape(name, cs, batches, args) for name in shapes]
    return 0 if all(v == "ok" for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
