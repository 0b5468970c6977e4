"""The command line as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "window_operator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_config_names_the_field_and_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text(
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumblng, size: 10s}\n"
        "aggregations: [{name: n, op: cnt}]\n"
    )
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1}\n')
    proc = cli("simulate", "--config", str(bad), "--input", str(events))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "window.type" in proc.stderr and "tumbling" in proc.stderr and "hopping" in proc.stderr


def test_unknown_op_is_a_config_error_listing_the_builtins(tmp_path: Path) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_text(
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: cnt}]\n"
    )
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1}\n')
    proc = cli("simulate", "--config", str(bad), "--input", str(events))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "aggregations.0.op" in proc.stderr and "count" in proc.stderr


def test_simulate_is_deterministic_and_reports_errors(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}.jsonl"
        errs = tmp_path / f"err{i}.jsonl"
        proc = cli(
            "simulate",
            "--config", "config/clicks.yaml",
            "--input", "config/samples/clicks.jsonl",
            "--output", str(out),
            "--errors", str(errs),
            "--batch-size", "25",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    results = [orjson.loads(line) for line in outs[0].splitlines()]
    assert {r["kind"] for r in results} >= {"ON_TIME", "LATE"}
    first = results[0]
    assert set(first) == {"key", "window_start", "window_end", "kind", "update_seq", "values"}
    assert set(first["values"]) == {
        "clicks", "mean_latency_ms", "max_latency_ms", "p95_latency_ms"
    }  # fmt: skip
    errors = [orjson.loads(line) for line in errs.read_bytes().splitlines()]
    assert sorted(e["code"] for e in errors) == ["BAD_JSON", "BAD_TIMESTAMP", "MISSING_TIMESTAMP"]
    assert all(e["reason"] and e["offset"] is not None for e in errors)


def test_simulate_meta_fields_partitions_offsets_and_replays(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: count}]\n"
    )
    lines = [
        {"k": "a", "ts": 1000, "partition": 0, "offset": 5},
        {"k": "a", "ts": 2000, "partition": 1, "offset": 0},
        {"k": "a", "ts": 3000, "partition": 0, "offset": 5},  # replay of offset 5
        {"k": "a", "ts": 4000, "partition": 0},  # offset 6
        {"k": "a", "ts": 15000, "partition": 1, "wall_ms": 99},
    ]
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    out = tmp_path / "out.jsonl"
    proc = cli("simulate", "--config", str(job), "--input", str(events), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    results = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {(r["window_start"], r["values"]["n"]) for r in results} == {(0, 3), (10000, 1)}
    assert "1 replayed" in proc.stderr
