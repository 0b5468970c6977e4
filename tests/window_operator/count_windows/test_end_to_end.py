"""Count and offsets windows through the ``simulate`` command."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from window_operator.config import parse_config
from window_operator.job import build_runtime
from window_operator.simulate import simulate as simulate_file

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


def test_simulate_offsets_windows_take_unplaced_lines_into_the_runs_partition(
    tmp_path: Path,
) -> None:
    """``simulate`` runs offsets windows over one partition: a line that names none (a
    broken line, too) is of that partition. Before, a broken line between two lines of
    partition 3 was placed in partition 0, and the run stopped with exit status 3."""
    runtime = build_runtime(
        parse_config(
            {
                "job": "x",
                "input": {"key": "k", "timestamp": "ts"},
                "window": {"type": "offsets", "size": 2},
                "aggregations": [{"name": "n", "op": "count"}],
            },
            base_dir=tmp_path,
        )
    )

    def run(name: str, text: bytes, *, final: bool) -> tuple[list[Any], list[Any]]:
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(text)
        out, errors = io.BytesIO(), io.BytesIO()
        state = tmp_path / "state"
        simulate_file(runtime, path, out, errors_out=errors, state_dir=state, final=final)
        results = [orjson.loads(r) for r in out.getvalue().splitlines()]
        return results, [orjson.loads(e) for e in errors.getvalue().splitlines()]

    first = b'{"k": "a", "ts": 0}\n{"partition": 3, "k": "a", "ts": 1}\n{"k":\n'
    results, errors = run("first", first, final=False)
    assert [(e["code"], e["partition"], e["offset"]) for e in errors] == [("BAD_JSON", 3, 2)]
    # offset 2, rejected, still closes [0, 2)
    assert [(r["partition"], r["window_start"], r["values"]["n"]) for r in results] == [(3, 0, 2)]
    # a continued run's lines without a partition are of the partition its state holds
    results, errors = run("second", b'{"k": "a", "ts": 2}\n[1]\n', final=True)
    assert [(e["code"], e["partition"], e["offset"]) for e in errors] == [("NOT_AN_OBJECT", 3, 4)]
    assert [(r["partition"], r["window_start"], r["values"]["n"]) for r in results] == [(3, 2, 1)]


def test_simulate_offsets_windows_place_a_broken_first_line_whatever_the_batch(
    tmp_path: Path,
) -> None:
    """The run's partition is the first one the file names: a broken first line is of
    it at every ``--batch-size`` (a review: per micro-batch, ``--batch-size 1`` put it
    in partition 0 and the run stopped at the next line, of partition 3)."""
    doc = {
        "job": "x",
        "input": {"key": "k", "timestamp": "ts"},
        "window": {"type": "offsets", "size": 2},
        "aggregations": [{"name": "n", "op": "count"}],
    }
    runtime = build_runtime(parse_config(doc, base_dir=tmp_path))
    path = tmp_path / "in.jsonl"
    lines = [
        b'{"k":',
        b'{"partition": 3, "k": "a", "ts": 1}',
        b'{"partition": 3, "k": "a", "ts": 2}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    outputs = []
    for batch in (1, 10):
        out = io.BytesIO()
        simulate_file(runtime, path, out, batch_size=batch)
        outputs.append([orjson.loads(r) for r in out.getvalue().splitlines()])
    assert outputs[0] == outputs[1]
    got = [(r["partition"], r["window_start"], r["values"]["n"]) for r in outputs[0]]
    assert got == [(3, 0, 1), (3, 2, 1)]
