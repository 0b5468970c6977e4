"""Fingerprints of ``simulate`` output for every window shape (a refactoring guard).

Run ``python benchmarks/golden_simulate.py [--events N] [--out FILE]``: generates a
seeded random stream per job (several partitions, out-of-order and late events, replays,
wall clocks), runs :func:`window_operator.simulate.simulate` over it with two batch
sizes, and prints one line ``<job> <batch size> <sha256 of results> <sha256 of errors>``
per run, plus the same for the sample files of ``config/``. Two checkouts that print the
same lines produce byte-identical output. ``--compare FILE`` exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from window_operator.config import load_any_config, parse_any_config
from window_operator.job import build_runtime
from window_operator.join import build_join_runtime
from window_operator.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent

AGG_BASE: dict[str, Any] = {
    "input": {"key": "k", "timestamp": "ts"},
    "watermark": {"allowed_lateness": "2s", "idle_timeout": "20s"},
    "retention": {"time": "2m"},
}

JOBS: dict[str, dict[str, Any]] = {
    "tumbling": {
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "s", "op": "sum", "field": "v"},
            {"name": "mx", "op": "max", "field": "v"},
        ],
        "emit": {"late": "5s", "early": "3s"},
    },
    "hopping": {
        "window": {"type": "hopping", "size": "30s", "step": "5s"},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "m", "op": "mean", "field": "v"},
            {"name": "sd", "op": "stddev", "field": "v"},
            {"name": "lr", "op": "linreg", "field": "v"},
        ],
        "emit": {"late": "per_arrival"},
    },
    "hopping-objects": {
        "window": {"type": "hopping", "size": "20s", "step": "10s"},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "p", "op": "percentile", "field": "v", "params": {"q": [0.5, 0.9]}},
            {"name": "f", "op": "first", "field": "tag"},
            {"name": "d", "op": "count_distinct", "field": "tag"},
            {"name": "mn", "op": "min", "field": "v"},
        ],
        "emit": {"late": "5s"},
    },
    "session": {
        "window": {"type": "session", "gap": "4s"},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "s", "op": "sum", "field": "v"},
            {"name": "c", "op": "collect", "field": "tag"},
        ],
        "emit": {"late": "per_arrival", "early": "5s"},
    },
    "session-tuple": {
        "window": {"type": "session", "max_idle_messages": 50},
        "aggregations": [{"name": "n", "op": "count"}, {"name": "mx", "op": "max", "field": "v"}],
    },
    "count": {
        "window": {"type": "count", "size": 20, "step": 5},
        "aggregations": [
            {"name": "n", "op": "count"},
            {"name": "m", "op": "mean", "field": "v"},
            {"name": "md", "op": "median", "field": "v"},
        ],
    },
    "offsets": {
        "window": {"type": "offsets", "size": 100, "step": 50},
        "aggregations": [{"name": "n", "op": "count"}, {"name": "s", "op": "sum", "field": "v"}],
    },
}

JOINS: dict[str, dict[str, Any]] = {
    "join-range-inner": {"range": "5s", "kind": "inner"},
    "join-between-left": {"between": ["-3s", "4s"], "kind": "left"},
    "join-rows-inner": {"rows": 3, "kind": "inner"},
    "join-range-full": {"range": "4s", "kind": "full"},
}


def agg_stream(n: int, seed: int, partitions: int = 3) -> list[bytes]:
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000_000
    ts = t0 + np.arange(n) * 7
    late = rng.random(n) < 0.1
    ts[late] -= rng.integers(1, 20_000, int(late.sum()))
    keys = rng.integers(0, 200, n)
    parts = rng.integers(0, partitions, n)
    vals = np.round(rng.normal(50, 20, n), 2)
    tags = rng.integers(0, 7, n)
    next_off = [0, 0, 0]
    lines = []
    for i in range(n):
        p = int(parts[i])
        rec: dict[str, Any] = {
            "k": f"key-{int(keys[i])}",
            "ts": int(ts[i]),
            "v": float(vals[i]),
            "tag": f"t{int(tags[i])}",
            "partition": p,
            "offset": next_off[p],
            "wall_ms": int(t0 + i * 7),
        }
        next_off[p] += 1
        if i % 4999 == 17:
            rec["ts"] -= 600_000  # out of retention
        if i % 7919 == 3:
            rec["v"] = "x"  # wrong type
        lines.append(orjson.dumps(rec))
        if i % 997 == 0 and i:
            lines.append(lines[-5])  # a replay
    return lines


def join_stream(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000_000
    lines = []
    offs = {"l": [0, 0], "r": [0, 0]}
    for i in range(n):
        src = "l" if rng.random() < 0.5 else "r"
        ts = t0 + i * 11 - (int(rng.integers(1, 8000)) if rng.random() < 0.1 else 0)
        p = int(rng.integers(0, 2))
        rec = {
            "source": src,
            "id": int(rng.integers(0, 300)),
            "time": ts,
            "x": float(np.round(rng.random(), 3)),
            "partition": p,
            "offset": offs[src][p],
            "wall_ms": t0 + i * 11,
        }
        offs[src][p] += 1
        if i % 4999 == 17:
            rec["time"] -= 600_000  # out of retention
        lines.append(orjson.dumps(rec))
        if i % 7919 == 3:
            lines.append(b'{"source": "l", "id": 1, "partition": 0}')  # no timestamp
    return lines


def join_doc(name: str, cond: dict[str, Any]) -> dict[str, Any]:
    return {
        "job": name,
        "join": {
            "left": {"name": "l", "timestamp": "time"},
            "right": {"name": "r", "timestamp": "time"},
            "on": ["id"],
            **cond,
        },
        "watermark": {"allowed_lateness": "1s", "idle_timeout": "30s"},
        "retention": {"time": "1m"},
    }


def fingerprint(runtime: Any, lines: list[bytes], batch: int) -> tuple[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        out, err = io.BytesIO(), io.BytesIO()
        simulate(runtime, path, out, errors_out=err, batch_size=batch)
    return hashlib.sha256(out.getvalue()).hexdigest()[:16], hashlib.sha256(
        err.getvalue()
    ).hexdigest()[:16]


def run(events: int) -> list[str]:
    rows = []
    for name, sections in JOBS.items():
        doc = {"job": name, **AGG_BASE, **sections}
        runtime = build_runtime(parse_any_config(doc, base_dir=ROOT))  # type: ignore[arg-type]
        # offsets windows cover one input partition per operator
        lines = agg_stream(events, seed=len(name), partitions=1 if name == "offsets" else 3)
        for batch in (1000, 9973):
            rows.append(f"{name} {batch} {' '.join(fingerprint(runtime, lines, batch))}")
    for name, cond in JOINS.items():
        jr = build_join_runtime(parse_any_config(join_doc(name, cond), base_dir=ROOT))  # type: ignore[arg-type]
        lines = join_stream(events, seed=len(name))
        for batch in (1000, 9973):
            rows.append(f"{name} {batch} {' '.join(fingerprint(jr, lines, batch))}")
    samples = [
        ("clicks", "config/clicks.yaml", "config/samples/clicks.jsonl"),
        (
            "orders-shipments",
            "config/orders-shipments.yaml",
            "config/samples/orders-shipments.jsonl",
        ),
    ]
    for name, cfg, data in samples:
        config = load_any_config(ROOT / cfg)
        rt: Any = (
            build_join_runtime(config) if hasattr(config, "join") else build_runtime(config)  # type: ignore[arg-type]
        )
        lines = (ROOT / data).read_bytes().splitlines()
        for batch in (1, 20, 10_000):
            rows.append(f"sample-{name} {batch} {' '.join(fingerprint(rt, lines, batch))}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args()
    rows = run(args.events)
    text = "\n".join(rows) + "\n"
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    if args.compare:
        want = args.compare.read_text().splitlines()
        diff = [f"- {a}\n+ {b}" for a, b in zip(want, rows, strict=False) if a != b]
        if diff or len(want) != len(rows):
            print("DIFFERENT:\n" + "\n".join(diff), file=sys.stderr)
            return 1
        print("identical", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
