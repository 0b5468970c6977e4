"""Throughput of time session windows on one core (events/s through ``add_batch``).

Run ``python benchmarks/bench_sessions.py`` (options: ``--events N`` default 1,000,000,
``--keys K`` default 100,000, ``--batch B`` default 100,000, ``--gap-ms`` default 30,000,
``--lateness-ms`` default 5,000, ``--sample S`` keys checked against the oracle
(default 2,000), ``--repeat R`` to keep
the best of R runs, ``--profile`` to cProfile the timed part, ``--help``). Exit status 1
when the result check fails.

Both wall-clock and process CPU time are printed: on a shared machine the CPU figure
(events / CPU seconds of this process, RocksDB's threads included) is the steadier one.

Workload: :func:`window_operator.sample_data.click_stream` with ``N`` events over ``K``
keys (``/page/<i>``, Zipf-like skew), 10,000 events per second of event time (1M events
span 100 s), 10 % of the events delayed by 1..10,000 ms (out of order). The job is a
session window (``gap`` 30 s) computing ``count``, ``sum``, ``mean`` and ``max`` of
``latency_ms``, with ``allowed_lateness: 5s``, ``retention: 1h`` and late results per
arrival, so merges of closed sessions produce RETRACT + LATE results.

Timed: micro-batches of ``EventBatch.from_columns`` (built before the clock starts)
through ``add_batch``, after each ``timeout(max ts)``, ``flush()`` (a RocksDB commit)
and ``take_result_batches()``; at the end ``timeout(END_OF_TIME)`` and a last flush.
Opening and closing the store are not timed.

Check: a consumer applies the results in order (a RETRACT deletes its
``(key, window_start, window_end)``, anything else upserts it); for a sample of keys
the surviving windows must equal the sessions of a plain-Python oracle (each key's
events sorted, split where consecutive times differ by more than the gap), with the
same count, sum, mean and max. The oracle uses no NumPy or pandas.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from window_operator.config import parse_config
from window_operator.events import EventBatch
from window_operator.job import JobRuntime, build_runtime
from window_operator.policies import END_OF_TIME
from window_operator.results import Kind, ResultBatch
from window_operator.sample_data import ClickStream, click_stream

TARGET = 300_000
Window = tuple[str, int, int]


def job_doc(gap_ms: int, lateness_ms: int = 5_000) -> dict[str, Any]:
    return {
        "job": "bench-sessions",
        "input": {"key": "page", "timestamp": "ts", "timestamp_unit": "ms"},
        "window": {"type": "session", "gap": gap_ms},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "sum", "op": "sum", "field": "latency_ms"},
            {"name": "mean", "op": "mean", "field": "latency_ms"},
            {"name": "max", "op": "max", "field": "latency_ms"},
        ],
        "watermark": {"allowed_lateness": lateness_ms},
        "emit": {"late": "per_arrival"},
        "retention": {"time": "1h"},
    }


def oracle(cs: ClickStream, keys: set[str], gap: int) -> dict[Window, dict[str, float]]:
    """Sessions of the sampled keys, in plain Python."""
    by_key: dict[str, list[tuple[int, float]]] = {}
    ts = cs.ts.tolist()
    lat = cs.latency_ms.tolist()
    for i, k in enumerate(cs.keys):
        if k in keys:
            by_key.setdefault(k, []).append((ts[i], lat[i]))
    out: dict[Window, dict[str, float]] = {}
    for k, evs in by_key.items():
        evs.sort()
        run = [evs[0]]
        for e in evs[1:]:
            if e[0] - run[-1][0] > gap:
                out[_window(k, run, gap)] = _values(run)
                run = []
            run.append(e)
        out[_window(k, run, gap)] = _values(run)
    return out


def _window(key: str, run: list[tuple[int, float]], gap: int) -> Window:
    return (key, run[0][0], run[-1][0] + gap)


def _values(run: list[tuple[int, float]]) -> dict[str, float]:
    vals = [v for _, v in run]
    return {
        "n": len(vals),
        "sum": math.fsum(vals),
        "mean": math.fsum(vals) / len(vals),
        "max": max(vals),
    }


def consume(batches: list[ResultBatch], keys: set[str]) -> tuple[dict[Window, Any], Counter[str]]:
    """The view of a consumer that upserts results and deletes on RETRACT."""
    view: dict[Window, Any] = {}
    kinds: Counter[str] = Counter()
    for b in batches:
        kinds[b.kind.value] += len(b)
        starts = b.window_start.tolist()
        ends = b.window_end.tolist()
        for i, k in enumerate(b.keys):
            if k not in keys:
                continue
            w = (k, starts[i], ends[i])
            if b.kind is Kind.RETRACT:
                if w not in view:
                    raise AssertionError(f"RETRACT of a window never emitted: {w}")
                del view[w]
            else:
                view[w] = {n: col[i] for n, col in b.values.items()}
    return view, kinds


def check(view: dict[Window, Any], want: dict[Window, dict[str, float]]) -> str:
    if view.keys() != want.keys():
        extra = sorted(view.keys() - want.keys())[:3]
        missing = sorted(want.keys() - view.keys())[:3]
        return f"FAILED: windows differ, unexpected {extra}, missing {missing}"
    for w, exp in want.items():
        got = view[w]
        for name, value in exp.items():
            if not math.isclose(got[name], value, rel_tol=1e-9, abs_tol=1e-9):
                return f"FAILED: {w} {name} = {got[name]}, expected {value}"
    return "ok"


@dataclass
class Run:
    """What one timed run measured (seconds; ``phases`` as (wall, CPU) pairs)."""

    wall: float
    cpu: float
    phases: dict[str, list[float]]
    results: list[ResultBatch]
    rejected: int
    late: int


def run_once(
    runtime: JobRuntime, batches: list[EventBatch], profile: cProfile.Profile | None
) -> Run:
    """Feed every micro-batch (+ timeout, flush, drain), then end the input; on a fresh store."""
    ticks = [int(b.ts.max()) for b in batches]
    out: list[ResultBatch] = []
    phases = {"add_batch": [0.0, 0.0], "timeout+flush": [0.0, 0.0], "end of time": [0.0, 0.0]}
    late = 0

    def timed(name: str, t0: float, c0: float) -> tuple[float, float]:
        t1, c1 = time.perf_counter(), time.process_time()
        phases[name][0] += t1 - t0
        phases[name][1] += c1 - c0
        return t1, c1

    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        agg = runtime.open_task(Path(tmp))

        def body() -> None:
            nonlocal late
            for batch, now in zip(batches, ticks, strict=True):
                t, c = time.perf_counter(), time.process_time()
                late += agg.add_batch(batch).late
                t, c = timed("add_batch", t, c)
                agg.timeout(now)
                agg.flush()
                out.extend(agg.take_result_batches())
                timed("timeout+flush", t, c)
            t, c = time.perf_counter(), time.process_time()
            agg.timeout(END_OF_TIME)
            agg.flush()
            out.extend(agg.take_result_batches())
            timed("end of time", t, c)

        t0, c0 = time.perf_counter(), time.process_time()
        if profile is None:
            body()
        else:
            profile.runcall(body)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rejected = len(agg.get_errors())
        agg.close()
    return Run(wall, cpu, phases, out, rejected, late)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--events", type=int, default=1_000_000, help="events in the stream (default %(default)s)"
    )
    ap.add_argument("--keys", type=int, default=100_000, help="distinct keys (default %(default)s)")
    ap.add_argument(
        "--batch", type=int, default=100_000, help="events per add_batch (default %(default)s)"
    )
    ap.add_argument(
        "--gap-ms", type=int, default=30_000, help="session gap in ms (default %(default)s)"
    )
    ap.add_argument(
        "--lateness-ms",
        type=int,
        default=5_000,
        help="allowed lateness in ms (default %(default)s)",
    )
    ap.add_argument(
        "--sample",
        type=int,
        default=2_000,
        help="keys checked against the oracle (default %(default)s)",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs; the best is shown (default %(default)s)"
    )
    ap.add_argument("--profile", action="store_true", help="cProfile the timed part")
    args = ap.parse_args(argv)
    cs = click_stream(args.events, n_keys=args.keys, events_per_second=10_000.0, out_of_order=0.1)
    batches = [
        EventBatch.from_columns(
            cs.keys[i : i + args.batch],
            cs.ts[i : i + args.batch],
            numeric={"latency_ms": cs.latency_ms[i : i + args.batch]},
        )
        for i in range(0, args.events, args.batch)
    ]
    doc = job_doc(args.gap_ms, args.lateness_ms)
    runtime = build_runtime(parse_config(doc, base_dir=Path(".")))
    prof = cProfile.Profile() if args.profile else None
    runs = [run_once(runtime, batches, prof) for _ in range(max(1, args.repeat))]
    best = min(runs, key=lambda r: r.wall)
    distinct = sorted(set(cs.keys))
    sample = set(random.Random(1).sample(distinct, min(args.sample, len(distinct))))
    want = oracle(cs, sample, args.gap_ms)
    verdicts = []
    for run in runs:
        view, kinds = consume(run.results, sample)
        verdicts.append(check(view, want) if not run.rejected else "FAILED: rejects")
    verdict = next((v for v in verdicts if v != "ok"), "ok")
    n = args.events
    print(
        f"session gap {args.gap_ms:,} ms, lateness {args.lateness_ms:,} ms, {n:,} events, "
        f"{len(distinct):,} keys, "
        f"add_batch of {args.batch:,} + timeout + flush (commit); best of {len(runs)}"
    )
    print(
        f"  {n / best.wall:,.0f} events/s wall ({best.wall:.2f} s), "
        f"{n / best.cpu:,.0f} events/s CPU ({best.cpu:.2f} s); target {TARGET:,}"
    )
    print(
        "  phases (wall / CPU s): "
        + ", ".join(f"{k} {w:.2f} / {c:.2f}" for k, (w, c) in best.phases.items())
    )
    print(
        f"  results {sum(kinds.values()):,}: {dict(kinds)}; late events {best.late:,}; "
        f"rejected {best.rejected}"
    )
    print(f"  check ({len(sample):,} keys, {len(want):,} sessions vs oracle): {verdict}")
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
