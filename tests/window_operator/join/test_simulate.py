"""Joins through ``simulate`` (the CLI) end to end: the seed's example, errors, outer rows."""

from __future__ import annotations

import io
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from joinkit import ROOT, Ev, hms, join_runtime, nested_loop, rows_oracle

from window_operator.join import JoinRuntime
from window_operator.simulate import simulate


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


def _simulated(runtime: JoinRuntime, lines: list[bytes], path: Path, batch: int) -> tuple[Any, ...]:
    path.write_bytes(b"\n".join(lines) + b"\n")
    out, errors = io.BytesIO(), io.BytesIO()
    simulate(runtime, path, out, errors_out=errors, batch_size=batch)
    error_rows = [orjson.loads(e) for e in errors.getvalue().splitlines()]
    return (
        sorted(out.getvalue().splitlines()),
        sorted((e["code"], e["partition"], e["offset"], e["topic"]) for e in error_rows),
    )


@settings(max_examples=40, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 600_000)), max_size=40
    ),
    batch=st.integers(2, 12),
    kind=st.sampled_from(["inner", "left", "full"]),
)
@example(
    # the fuzzed case: R's old event was rejected behind the watermark L's lines had moved
    events=[(True, 1, 0), (False, 1, 600_000), (True, 1, 600_000), (True, 2, 60_000),
            (False, 2, 61_000)],
    batch=10,
    kind="inner",
)  # fmt: skip
def test_the_order_of_the_two_inputs_within_a_batch_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    events: list[tuple[bool, int, int]],
    batch: int,
    kind: str,
) -> None:
    """On Kafka a batch adds one input's rows, then the other's; a simulated batch takes
    its lines in file order. Both decide retention with the watermark before the batch, so
    pairs, unmatched rows and error records are the same (fuzzed against Spark)."""
    runtime = join_runtime({"range": "2m", "kind": kind}, retention="3m")
    t0 = 1_795_560_000_000
    offsets = {"L": 0, "R": 0}
    lines = []
    for left, key, dt in events:
        source = "L" if left else "R"
        line = {"source": source, "k": key, "ts": t0 + dt, "offset": offsets[source]}
        offsets[source] += 1
        lines.append(orjson.dumps(line))
    grouped = []
    for start in range(0, len(lines), batch):
        part = lines[start : start + batch]
        grouped += sorted(part, key=lambda line: b'"source":"R"' in line)  # L first, stable
    tmp = tmp_path_factory.mktemp("join-order")
    assert _simulated(runtime, lines, tmp / "file.jsonl", batch) == _simulated(
        runtime, grouped, tmp / "grouped.jsonl", batch
    )


def test_join_error_records_carry_their_lines_and_offsets(tmp_path: Path) -> None:
    """As in an aggregation: ``raw`` is the line as read, a rejected line without an
    offset takes the next one of its partition, and its replay is not reported again."""
    runtime = join_runtime({"range": "2m"}, retention="3m")
    t0 = 1_795_560_000_000
    year_3000 = 32_503_680_000_000
    lines = [
        b'{"source":"L","k":1,"ts":%d}' % t0,
        b'{"source":"L","k":1,"ts":%d}' % year_3000,
        b'{"source":"L","k":1,"ts":"soon"}',
        b'{"source":"L","k":2, "ts":%d}' % (t0 + 1),
        b'{"source":"L","k":1,"ts":%d,"offset":1}' % year_3000,  # a replay of offset 1
        b'{"source":"R","k":2,"ts":%d,"partition":3}' % (t0 + 2),
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    out, errors = io.BytesIO(), io.BytesIO()
    summary = simulate(runtime, path, out, errors_out=errors, batch_size=2)
    got = [orjson.loads(e) for e in errors.getvalue().splitlines()]
    assert [(e["code"], e["partition"], e["offset"], e["raw"].encode()) for e in got] == [
        ("FUTURE_TIMESTAMP", 0, 1, lines[1]),
        ("BAD_TIMESTAMP", 0, 2, lines[2]),
    ]
    assert (summary.applied, summary.replayed) == (3, 1)
    pairs = [orjson.loads(r) for r in out.getvalue().splitlines()]
    assert [(p["kind"], p["key"]) for p in pairs] == [("MATCH", {"k": 2})]


def test_a_join_line_beyond_the_positions_a_join_holds_is_a_wrong_type(tmp_path: Path) -> None:
    runtime = join_runtime({"range": "2m"}, retention="3m")
    t0 = 1_795_560_000_000
    lines = [
        b'{"source":"L","k":1,"ts":%d,"partition":32768}' % t0,  # 15 bits of partition
        b'{"source":"L","k":1,"ts":%d,"offset":281474976710656}' % t0,  # 48 bits of offset
        b'{"source":"L","k":1,"ts":%d,"offset":18446744073709551615}' % t0,
        b'{"source":"L","k":1,"ts":%d,"wall_ms":18446744073709551615}' % t0,
        b'{"source":"R","k":1,"ts":%d,"partition":32767,"offset":281474976710655}' % t0,
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    out, errors = io.BytesIO(), io.BytesIO()
    summary = simulate(runtime, path, out, errors_out=errors, batch_size=2)
    got = [orjson.loads(e) for e in errors.getvalue().splitlines()]
    assert [(e["code"], e["partition"]) for e in got] == [
        ("WRONG_TYPE", None), ("WRONG_TYPE", 0), ("WRONG_TYPE", 0)
    ]  # fmt: skip
    assert "from 0 to 32767, got 32768" in got[0]["reason"]
    assert summary.applied == 2
    assert [orjson.loads(r)["kind"] for r in out.getvalue().splitlines()] == ["MATCH"]


#: Event times of the self-join tests.
T0 = 1_795_560_000_000


def _self_join(condition: dict[str, Any]) -> JoinRuntime:
    """A join of inputs L and R that both read topic ``t``."""
    return join_runtime(
        {"left": {"name": "L", "topic": "t", "timestamp": "ts"},
         "right": {"name": "R", "topic": "t", "timestamp": "ts"},
         **condition},
    )  # fmt: skip


def _simulated_pairs(
    runtime: JoinRuntime, path: Path, lines: list[bytes], batch: int
) -> Counter[tuple[str, int, int]]:
    """The ``(kind, left n, right n)`` results of simulating ``lines`` from ``path``."""
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    out = io.BytesIO()
    simulate(runtime, path, out, batch_size=batch)
    return Counter(
        (r["kind"], r["left"]["n"], r["right"]["n"])
        for r in map(orjson.loads, out.getvalue().splitlines())
    )


@settings(max_examples=25, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 300_000)), max_size=30
    ),
    batch=st.integers(1, 12),
)
def test_a_self_join_line_reaches_both_inputs_as_a_record_of_its_topic_does(
    tmp_path_factory: pytest.TempPathFactory, events: list[tuple[bool, int, int]], batch: int
) -> None:
    """Both inputs read topic ``t``: on Kafka every record of it reaches both, so a file
    ``produce`` loads (each line once) must simulate as the job runs it, whichever input
    a line names. Before, a line reached only the input it names: no pair of a record
    with itself, half the pairs of two records."""
    runtime = _self_join({"range": "1m"})
    evs = [Ev(0, key, "", T0 + dt, n) for n, (_, key, dt) in enumerate(events)]
    lines = [
        orjson.dumps({"source": "L" if left else "R", **e.record})
        for (left, _, _), e in zip(events, evs, strict=True)
    ]
    path = tmp_path_factory.mktemp("self-join") / "in.jsonl"
    got = _simulated_pairs(runtime, path, lines, batch)
    both_sides = [Ev(side, e.k, e.k2, e.ts, e.n) for e in evs for side in (0, 1)]
    expected = nested_loop(both_sides, ["k"], 0, 60_000)  # RANGE 1m PRECEDING
    assert got == expected
    assert all(expected[("MATCH", e.n, e.n)] == 1 for e in evs)  # each with itself


@settings(max_examples=30, deadline=None)
@given(
    events=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 300_000)), max_size=25),
    batch=st.integers(1, 12),
    n_rows=st.integers(1, 3),
)
@example(events=[(1, 0), (1, 1), (1, 2)], batch=10, n_rows=1)  # the oracle helper's case
def test_a_rows_self_join_takes_each_line_left_then_right_in_file_order(
    tmp_path_factory: pytest.TempPathFactory,
    events: list[tuple[int, int]],
    batch: int,
    n_rows: int,
) -> None:
    """A rows join follows the arrival order: each line of a self-join reaches the left
    input, then the right, before the next line, as records of one topic with distinct
    timestamps do on Kafka. Before, a batch's lines all reached the left input first,
    so a right row saw left rows of later lines, and the pairs depended on the batch."""
    runtime = _self_join({"rows": n_rows})
    evs = [Ev(0, key, "", T0 + dt, n) for n, (key, dt) in enumerate(events)]
    lines = [orjson.dumps({"source": "L", **e.record}) for e in evs]
    path = tmp_path_factory.mktemp("rows-self-join") / "in.jsonl"
    got = _simulated_pairs(runtime, path, lines, batch)
    arrival = [Ev(side, e.k, e.k2, e.ts, e.n) for e in evs for side in (0, 1)]
    assert got == rows_oracle(arrival, ["k"], n_rows)


def test_simulate_says_that_a_self_join_line_reached_both_inputs(tmp_path: Path) -> None:
    """A file written for the old rule (each record once per input) now doubles its
    records: the closing lines say how a self-join's lines are read."""
    job = tmp_path / "self.yaml"
    job.write_text(
        "job: s\njoin:\n"
        "  left: {name: a, topic: t, timestamp: ts}\n"
        "  right: {name: b, topic: t, timestamp: ts}\n"
        '  "on": [user]\n'
        "  between: [-5s, 5s]\n"
    )
    events = tmp_path / "e.jsonl"
    events.write_bytes(b'{"source": "a", "user": "u1", "ts": 1000}\n')
    proc = cli("simulate", "--config", str(job), "--input", str(events))
    assert proc.returncode == 0, proc.stderr
    assert b"1 lines, 2 applied" in proc.stderr
    assert b"every line reached both, whichever input it names" in proc.stderr
    assert [orjson.loads(r)["kind"] for r in proc.stdout.splitlines()] == ["MATCH"]
