"""Joins through ``simulate`` (the CLI) end to end: the seed's example, errors, outer rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
from joinkit import ROOT, hms


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
