"""Count and offsets windows through the ``simulate`` command."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[3]


def simulate(
    tmp_path: Path, config: str, lines: Sequence[dict[str, Any]], *extra: str
) -> list[dict[str, Any]]:
    job = tmp_path / "job.yaml"
    job.write_text(config)
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "window_operator",
            "simulate",
            "--config",
            str(job),
            "--input",
            str(events),
            "--output",
            str(out),
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def test_simulate_count_windows_end_to_end(tmp_path: Path) -> None:
    config = (
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: count, size: 3, step: 1}\n"
        "aggregations: [{name: n, op: count}, {name: s, op: sum, field: v}]\n"
    )
    lines = [{"k": "ab"[i % 3 == 0], "ts": i, "v": i} for i in range(10)]
    results = simulate(tmp_path, config, lines, "--batch-size", "4")
    got = {
        (r["key"], r["window_start"]): (r["window_end"], r["values"]["n"], r["values"]["s"])
        for r in results
    }
    a = [i for i in range(10) if i % 3]
    b = [i for i in range(10) if not i % 3]
    want = {
        (key, s): (s + 3, len(seq[s : s + 3]), float(sum(seq[s : s + 3])))
        for key, seq in (("a", a), ("b", b))
        for s in range(len(seq))
    }
    assert got == want and len(results) == len(want)


def test_simulate_offsets_windows_end_to_end(tmp_path: Path) -> None:
    config = (
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: offsets, size: 4, step: 2}\n"
        "aggregations: [{name: n, op: count}]\n"
    )
    lines = [
        {"k": k, "ts": 0, "offset": o}
        for k, o in [("a", 0), ("b", 1), ("a", 3), ("a", 4), ("b", 7)]
    ]
    lines.append({"k": "a", "ts": 0, "offset": 3})  # a replay
    results = simulate(tmp_path, config, lines, "--batch-size", "2")
    got = sorted((r["key"], r["window_start"], r["window_end"], r["values"]["n"]) for r in results)
    assert got == [
        ("a", 0, 4, 2), ("a", 2, 6, 2), ("a", 4, 8, 1),
        ("b", 0, 4, 1), ("b", 4, 8, 1), ("b", 6, 10, 1),
    ]  # fmt: skip
