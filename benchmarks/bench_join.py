"""Join benchmark: 500,000 orders + 500,000 shipments on 10,000 keys, RANGE 2 min PRECEDING.

    python benchmarks/bench_join.py [--events 1000000] [--keys 10000] [--batch 10000]

Events arrive roughly in event-time order (up to 5 s out of order) over 100 minutes, in
micro-batches of ``--batch`` events; each micro-batch is one call per input followed by
a ``flush`` (a checkpoint), as a task runs it. Each mode runs ``--repeat`` times and the
best wall and CPU figures are shown (CPU time of the operator's thread is the one-core
figure; process CPU adds RocksDB's background threads). Two modes: records (dicts
decoded by the job's decoders through ``add_records``, the simulate/Kafka path) and
pre-decoded :class:`~window_operator.join.JoinRows` through ``add_batch`` (the typed
protocol). Both runs are checked against a vectorized oracle (count and a checksum of
the matched ``(left_ts, right_ts, key)`` pairs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from window_operator.config import JoinJobConfig, parse_any_config
from window_operator.join import JoinResultBatch, JoinRows, build_join_runtime

IntArray = npt.NDArray[np.int64]
RANGE_MS = 120_000
SPAN_MS = 100 * 60_000
JITTER_MS = 5_000
_MOD = (1 << 31) - 1


def job(state: str) -> JoinJobConfig:
    config = parse_any_config(
        {
            "job": "bench-join",
            "join": {
                "left": {"name": "orders", "timestamp": "ts"},
                "right": {"name": "shipments", "timestamp": "ts"},
                "on": ["id"],
                "range": "2m",
            },
            "watermark": {"allowed_lateness": "10s"},
            "retention": {"time": "1h"},
            "state": {"dir": state},
        },
        base_dir=Path("."),
    )
    assert isinstance(config, JoinJobConfig)
    return config


def make_events(n: int, keys: int, seed: int = 7) -> dict[str, IntArray]:
    """Half orders, half shipments; arrival order = event time plus up to 5 s of jitter."""
    rng = np.random.default_rng(seed)
    side = np.arange(n) % 2
    key = rng.integers(0, keys, n)
    ts = 1_700_000_000_000 + rng.integers(0, SPAN_MS, n)
    arrival = np.argsort(ts + rng.integers(0, JITTER_MS, n), kind="stable")
    return {"side": side[arrival], "key": key[arrival], "ts": ts[arrival]}


def checksum(key: IntArray, left_ts: IntArray, right_ts: IntArray) -> int:
    h = (left_ts % _MOD) * 1_000_003 + (right_ts % _MOD) * 7919 + key
    return int(np.sum(h % _MOD, dtype=np.uint64)) % _MOD


def oracle(ev: dict[str, IntArray]) -> tuple[int, int]:
    """Every (order, shipment) pair with equal key and 0 <= s.ts - o.ts <= 2 min."""
    left = ev["side"] == 0
    lk, lt = ev["key"][left], ev["ts"][left]
    rk, rt = ev["key"][~left], ev["ts"][~left]
    order = np.lexsort((lt, lk))
    lk, lt = lk[order], lt[order]
    base = int(min(lt.min(), rt.min())) - RANGE_MS - 1
    span = 1 << 40
    codes = lk * span + (lt - base)
    lo = np.searchsorted(codes, rk * span + (rt - RANGE_MS - base), side="left")
    hi = np.searchsorted(codes, rk * span + (rt - base), side="right")
    counts = hi - lo
    probe = np.repeat(np.arange(len(rk)), counts)
    first = np.cumsum(counts) - counts
    slot = lo[probe] + (np.arange(int(counts.sum())) - first[probe])
    return int(counts.sum()), checksum(rk[probe], lt[slot], rt[probe])


def run(
    ev: dict[str, IntArray], batch: int, keys: int, mode: str
) -> tuple[float, float, float, int, int]:
    names = ("orders", "shipments")
    n = len(ev["ts"])
    # Inputs are prepared outside the timed loop: dicts as a consumer would hand them over.
    chunks: list[list[tuple[int, Any]]] = []
    for s in range(0, n, batch):
        part: list[tuple[int, Any]] = []
        for side in (0, 1):
            sel = np.flatnonzero(ev["side"][s : s + batch] == side) + s
            ids, tss = ev["key"][sel].tolist(), ev["ts"][sel].tolist()
            if mode == "records":
                recs = [
                    {"id": k, "ts": t, "n": int(i)}
                    for k, t, i in zip(ids, tss, sel.tolist(), strict=True)
                ]
                part.append((side, recs))
            else:
                # exact-size copies: kept-alive orjson buffers fragment the heap
                payload = [
                    bytes(memoryview(orjson.dumps({"id": k, "ts": t})))
                    for k, t in zip(ids, tss, strict=True)
                ]
                part.append((side, JoinRows.from_columns(ids, tss, payload, source=side)))
        chunks.append(part)
    with tempfile.TemporaryDirectory(prefix="bench-join-") as tmp:
        runtime = build_join_runtime(job(tmp))
        op = runtime.open_task(Path(tmp))
        taken: list[JoinResultBatch] = []
        t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
        for part in chunks:
            for side, events in part:
                if mode == "records":
                    op.add_records(names[side], events)
                else:
                    op.add_batch(events)
            taken.extend(op.take_result_batches())
            op.flush()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        main = time.thread_time() - m0
        op.close()
    got = 0
    sums: list[int] = []
    for b in taken:
        got += len(b)
        assert b.left_ts is not None and b.right_ts is not None
        key = np.fromiter((orjson.loads(k)["id"] for k in b.keys), np.int64, len(b))
        sums.append(checksum(key, b.left_ts, b.right_ts))
    return elapsed, cpu, main, got, sum(sums) % _MOD


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--events", type=int, default=1_000_000, help="events in the stream (default %(default)s)"
    )
    ap.add_argument("--keys", type=int, default=10_000, help="distinct keys (default %(default)s)")
    ap.add_argument(
        "--batch", type=int, default=10_000, help="events per add_batch (default %(default)s)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode; the best is shown")
    args = ap.parse_args()
    ev = make_events(args.events, args.keys)
    expected, expected_sum = oracle(ev)
    print(
        f"join bench: {args.events:,} events ({args.events // 2:,} + {args.events // 2:,}), "
        f"{args.keys:,} keys, RANGE 2 min, micro-batches of {args.batch:,}"
    )
    ok = True
    for mode in ("records", "rows"):
        runs = [run(ev, args.batch, args.keys, mode) for _ in range(args.repeat)]
        elapsed = min(r[0] for r in runs)
        cpu = min(r[1] for r in runs)
        main = min(r[2] for r in runs)
        got, got_sum = runs[0][3], runs[0][4]
        ok &= all(r[3:] == runs[0][3:] for r in runs)
        good = got == expected and got_sum == expected_sum
        ok &= good
        print(
            f"  {mode:8s} {args.events / elapsed:>10,.0f} events/s wall ({elapsed:5.2f} s), "
            f"{args.events / main:>10,.0f} events/s operator thread ({main:5.2f} s CPU), "
            f"{args.events / cpu:>10,.0f} events/s process ({cpu:5.2f} s CPU incl. RocksDB)  "
            f"{got:,} results (oracle {expected:,}) {'OK' if good else 'MISMATCH'}"
        )
    if not ok:
        raise SystemExit("result mismatch against the oracle")


if __name__ == "__main__":
    main()
