"""Throughput of the window engine on one core (events/s per scenario).

Run ``python benchmarks/bench_engine.py`` (options: ``--events N`` default 1,000,000,
``--keys K`` default 10,000, ``--only a,b,c,one,d``, ``--repeat R`` to keep the best of R
runs on a noisy machine, ``--profile [--sort tottime|cumulative] [--top 25]`` to
cProfile the timed part in-process instead (``d`` then profiles ``simulate()`` without
the CLI), ``--help``). Exit status 1 when a result check fails.

Workload
--------
A synthetic click stream from :func:`window_operator.sample_data.click_stream`:
``N`` events (default 1,000,000) over ``K`` keys (default 10,000, ``/page/<i>`` with the
generator's Zipf-like skew), 10,000 events per second of event time (so 1M events span
100 s), 10 % of the events delayed by 1..10,000 ms (out of order), latency values
log-normal. Every job has ``allowed_lateness: 5s``, ``retention: 1h`` and late
re-emission batched every 10 s (``emit.late: 10s``). The wall clock used by the timers
is the event time: after each (micro-)batch ``agg.timeout(max ts of the batch)`` runs.
At the end ``agg.timeout(END_OF_TIME)`` fires every window and a last ``flush()``
commits; both are timed. Opening and closing the store is not.

Scenarios (each in a fresh child process, on a fresh temporary RocksDB on disk; the
input is generated, and batches built, before the clock starts):

``a``    tumbling 60 s ``count`` via ``add_batch`` of ``EventBatch.from_columns`` built from
         NumPy arrays and a list of keys, micro-batches of 100,000 events; after each
         batch: ``timeout``, ``flush()`` (a commit, as in the streaming job) and
         ``take_result_batches()``.
``b``    hopping 60 s / 10 s ``mean(latency_ms)``, same feeding, ``use_deduct=True``.
``c``    the same as ``b`` with ``use_deduct=False``.
``e``    the same as ``b`` with EARLY results every 5 s (``emit.early: 5s``, the timers'
         wall clock is the event time) in micro-batches of 10,000 events (1 s of event
         time): every open window of a key that changed goes out EARLY every 5 batches,
         and its update sequence is kept in the window bookkeeping.
``f``    ``e`` under a memory budget of 2 MiB (``state.cache_mb``), a fraction of its open
         frames: the oldest are spilled to RocksDB and read back to fire, to merge late
         events and for the EARLY results of the keys that changed.
``one``  hopping 60 s / 10 s ``mean`` through ``add_message(dict)`` one event at a time
         (``--one-events``, default 200,000 events), ``timeout`` every 10,000 messages
         (1 s of event time), ``flush()`` + drain every 100,000 messages.
``d``    ``window-operator simulate`` (hopping 60 s / 10 s, ``count`` + ``mean``) over a
         JSONL file of the ``N`` events, as a subprocess, default ``--batch-size``
         (10,000), results written to a file; lines/s over the subprocess wall time
         (interpreter start-up and imports included; the fixed cost is measured apart
         on a 10-line file and shown in the notes).

Every scenario is checked against a NumPy reference computed from the input: the last
result emitted per ``(key, window)`` (ON_TIME or a later LATE) must equal the count /
mean of all accepted events of that window, the set of windows must match, and for
tumbling counts the final counts must sum to ``N - rejected``. A failed check prints
``check: FAILED`` with the reason and the script exits with status 1.

Peak RSS is ``ru_maxrss`` of the child process that ran the scenario (input data
included); for ``d`` that of the ``simulate`` subprocess.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from window_operator.config import parse_config
from window_operator.events import EventBatch
from window_operator.job import build_runtime
from window_operator.policies import END_OF_TIME
from window_operator.results import ResultBatch
from window_operator.sample_data import ClickStream, click_stream
from window_operator.timewindows import WindowedAggregator

SIZE_MS = 60_000
STEP_MS = 10_000
EVENTS_PER_SECOND = 10_000.0
OUT_OF_ORDER = 0.1
MAX_DELAY_MS = 10_000
MICRO_BATCH = 100_000
ONE_TICK = 10_000
ONE_FLUSH = 100_000
SCENARIOS = ("a", "b", "c", "e", "f", "one", "d")
#: Micro-batches of scenarios e and f: 1 s of event time, so an EARLY pass runs every 5.
EARLY_BATCH = 10_000
#: The memory budget of scenario f (``state.cache_mb``): a fraction of its open frames.
BUDGET_MB = 2
#: Targets on one core (events or lines per second).
TARGETS = {
    "a": 1_000_000,
    "b": 1_000_000,
    "c": 1_000_000,
    "e": 250_000,
    "f": 150_000,
    "one": 100_000,
    "d": 300_000,
}
TITLES = {
    "a": "tumbling 60s count, add_batch(100k) + flush",
    "b": "hopping 60s/10s mean, add_batch, deduct",
    "c": "hopping 60s/10s mean, add_batch, no deduct",
    "e": "hopping 60s/10s mean, EARLY every 5s, add_batch(10k)",
    "f": "e under a 2 MiB memory budget (frames spilled)",
    "one": "hopping 60s/10s mean, add_message(dict)",
    "d": "window-operator simulate (JSONL, count+mean)",
}
#: Relative tolerance of means (deduct subtracts floating-point sums).
MEAN_RTOL = 1e-9

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass
class Outcome:
    """What one scenario measured."""

    name: str
    events: int
    seconds: float
    cpu_seconds: float = 0.0
    results: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    late_events: int = -1
    rss_mb: float = 0.0
    check: str = "ok"
    notes: str = ""

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else float("inf")


class CheckFailed(AssertionError):
    """A scenario produced wrong results."""


# ---------------------------------------------------------------------------- jobs


def job_doc(window: str, aggs: list[dict[str, Any]]) -> dict[str, Any]:
    """A job document for the click stream with the benchmark's policies."""
    win: dict[str, Any] = (
        {"type": "tumbling", "size": "60s"}
        if window == "tumbling"
        else {"type": "hopping", "size": "60s", "step": "10s"}
    )
    return {
        "job": "bench",
        "input": {"key": "page", "timestamp": "ts", "timestamp_unit": "ms"},
        "window": win,
        "aggregations": aggs,
        "watermark": {"allowed_lateness": "5s"},
        "emit": {"late": "10s"},
        "retention": {"time": "1h"},
    }


COUNT = {"name": "clicks", "op": "count"}
MEAN = {"name": "mean_latency_ms", "op": "mean", "field": "latency_ms"}


def open_task(doc: dict[str, Any], state_dir: Path, use_deduct: bool | None) -> WindowedAggregator:
    runtime = build_runtime(parse_config(doc, base_dir=state_dir))
    return runtime.open_task(state_dir, use_deduct=use_deduct)


def make_stream(n: int, keys: int) -> ClickStream:
    return click_stream(
        n,
        n_keys=keys,
        events_per_second=EVENTS_PER_SECOND,
        out_of_order=OUT_OF_ORDER,
        max_delay_ms=MAX_DELAY_MS,
    )


# ---------------------------------------------------------------------------- reference


@dataclass
class Reference:
    """Expected final values per (key, window start)."""

    count: dict[tuple[str, int], int]
    mean: dict[tuple[str, int], float]


def reference(cs: ClickStream, size: int, step: int) -> Reference:
    """Count and mean of every window, computed directly from the input."""
    names: dict[str, int] = {}
    kid = np.fromiter(
        (names.setdefault(k, len(names)) for k in cs.keys), dtype=np.int64, count=len(cs)
    )
    key_of = list(names)
    frame = cs.ts - np.mod(cs.ts, step)
    f0 = int(frame.min()) - size
    span = (int(frame.max()) - f0) // step + 1
    code = kid * span + (frame - f0) // step
    fcode, inv = np.unique(code, return_inverse=True)
    fcount = np.bincount(inv).astype(np.float64)
    fsum = np.bincount(inv, weights=cs.latency_ms)
    k = size // step
    wcode = np.concatenate([fcode - j for j in range(k)])
    ucode, winv = np.unique(wcode, return_inverse=True)
    wcount = np.bincount(winv, weights=np.tile(fcount, k))
    wsum = np.bincount(winv, weights=np.tile(fsum, k))
    wkid = (ucode // span).tolist()
    wstart = ((ucode % span) * step + f0).tolist()
    wkeys = [(key_of[i], s) for i, s in zip(wkid, wstart, strict=True)]
    return Reference(
        count=dict(zip(wkeys, (int(c) for c in wcount.tolist()), strict=True)),
        mean=dict(zip(wkeys, (wsum / wcount).tolist(), strict=True)),
    )


def final_values(
    batches: Iterable[ResultBatch], name: str
) -> tuple[dict[tuple[str, int], Any], Counter[str]]:
    """The last emitted value of ``name`` per (key, window start); results by kind."""
    final: dict[tuple[str, int], Any] = {}
    kinds: Counter[str] = Counter()
    for b in batches:
        kinds[b.kind.value] += len(b)
        starts = b.window_start.tolist()
        for key, start, value in zip(b.keys, starts, b.values[name], strict=True):
            final[(key, start)] = value
    return final, kinds


def check_counts(final: dict[tuple[str, int], Any], ref: Reference, expected_total: int) -> None:
    total = sum(final.values())
    if total != expected_total:
        raise CheckFailed(f"final counts sum to {total}, expected {expected_total}")
    if final.keys() != ref.count.keys():
        extra = len(final.keys() - ref.count.keys())
        missing = len(ref.count.keys() - final.keys())
        raise CheckFailed(f"windows differ: {extra} unexpected, {missing} missing")
    wrong = [kw for kw, c in ref.count.items() if final[kw] != c]
    if wrong:
        kw = wrong[0]
        raise CheckFailed(
            f"{len(wrong)} windows have a wrong count, e.g. {kw}: {final[kw]} != {ref.count[kw]}"
        )


def check_means(final: dict[tuple[str, int], Any], ref: Reference) -> None:
    if final.keys() != ref.mean.keys():
        extra = len(final.keys() - ref.mean.keys())
        missing = len(ref.mean.keys() - final.keys())
        raise CheckFailed(f"windows differ: {extra} unexpected, {missing} missing")
    keys = list(ref.mean)
    got = np.array([np.nan if final[kw] is None else final[kw] for kw in keys], dtype=np.float64)
    want = np.array([ref.mean[kw] for kw in keys], dtype=np.float64)
    bad = ~np.isclose(got, want, rtol=MEAN_RTOL, atol=0.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CheckFailed(
            f"{int(bad.sum())} windows have a wrong mean, e.g. {keys[i]}: {got[i]} != {want[i]}"
        )


# ---------------------------------------------------------------------------- scenarios


Timed = Callable[[], None]


def run_timed(body: Timed, profiler: cProfile.Profile | None) -> tuple[float, float]:
    """Run ``body`` once, under ``profiler`` if given; return (wall, process CPU) seconds."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    if profiler is None:
        body()
    else:
        profiler.runcall(body)
    return time.perf_counter() - t0, time.process_time() - c0


def scenario_batch(
    name: str, n: int, keys: int, tmp: Path, profiler: cProfile.Profile | None
) -> Outcome:
    """Scenarios a, b, c: micro-batches of decoded columns through ``add_batch``."""
    cs = make_stream(n, keys)
    tumbling = name == "a"
    doc = job_doc("tumbling" if tumbling else "hopping", [COUNT] if tumbling else [MEAN])
    if name in ("e", "f"):
        doc["emit"] = {**doc["emit"], "early": "5s"}
    if name == "f":
        doc["state"] = {"cache_mb": BUDGET_MB}
    use_deduct = {"a": None, "b": True, "c": False, "e": True, "f": True}[name]
    numeric = {} if tumbling else {"latency_ms": cs.latency_ms}
    size = EARLY_BATCH if name in ("e", "f") else MICRO_BATCH
    batches = [
        EventBatch.from_columns(
            cs.keys[i : i + size],
            cs.ts[i : i + size],
            numeric={f: v[i : i + size] for f, v in numeric.items()},
        )
        for i in range(0, n, size)
    ]
    ticks = [int(b.ts.max()) for b in batches]
    agg = open_task(doc, tmp, use_deduct)
    out: list[ResultBatch] = []
    late = [0]
    # Seconds per phase: add_batch, timeout, flush, final END_OF_TIME fire + flush.
    phase = [0.0, 0.0, 0.0, 0.0]
    clock = time.perf_counter

    def body() -> None:
        for batch, now in zip(batches, ticks, strict=True):
            t0 = clock()
            stats = agg.add_batch(batch)
            t1 = clock()
            late[0] += stats.late
            agg.timeout(now)
            t2 = clock()
            agg.flush()
            out.extend(agg.take_result_batches())
            t3 = clock()
            phase[0] += t1 - t0
            phase[1] += t2 - t1
            phase[2] += t3 - t2
        t0 = clock()
        agg.timeout(END_OF_TIME)
        agg.flush()
        out.extend(agg.take_result_batches())
        phase[3] += clock() - t0

    seconds, cpu = run_timed(body, profiler)
    rejected = len(agg.get_errors())
    agg.close()
    outcome = Outcome(name, n, seconds, cpu, rejected=rejected, late_events=late[0])
    step = SIZE_MS if tumbling else STEP_MS
    ref = reference(cs, SIZE_MS, step)
    final, kinds = final_values(out, "clicks" if tumbling else "mean_latency_ms")
    outcome.results = sum(kinds.values())
    outcome.by_kind = dict(kinds)
    if rejected:
        raise CheckFailed(f"{rejected} events rejected; none is out of a 1h retention")
    if tumbling:
        check_counts(final, ref, n - rejected)
    else:
        check_means(final, ref)
    outcome.notes = (
        f"{len(batches)} micro-batches of {size:,}; seconds in add_batch {phase[0]:.2f}, "
        f"timeout {phase[1]:.2f}, flush+drain {phase[2]:.2f}, final fire+flush {phase[3]:.2f}"
    )
    return outcome


def scenario_one(n: int, keys: int, tmp: Path, profiler: cProfile.Profile | None) -> Outcome:
    """Scenario one: dicts one by one through ``add_message``."""
    cs = make_stream(n, keys)
    records = cs.records()
    chunks = [records[i : i + ONE_TICK] for i in range(0, n, ONE_TICK)]
    ticks = [int(cs.ts[i : i + ONE_TICK].max()) for i in range(0, n, ONE_TICK)]
    flush_every = max(1, ONE_FLUSH // ONE_TICK)
    agg = open_task(job_doc("hopping", [MEAN]), tmp, None)
    out: list[ResultBatch] = []

    def body() -> None:
        add = agg.add_message
        for i, (chunk, now) in enumerate(zip(chunks, ticks, strict=True)):
            for rec in chunk:
                add(rec)
            agg.timeout(now)
            if (i + 1) % flush_every == 0:
                agg.flush()
                out.extend(agg.take_result_batches())
        agg.timeout(END_OF_TIME)
        agg.flush()
        out.extend(agg.take_result_batches())

    seconds, cpu = run_timed(body, profiler)
    rejected = len(agg.get_errors())
    agg.close()
    outcome = Outcome("one", n, seconds, cpu, rejected=rejected)
    final, kinds = final_values(out, "mean_latency_ms")
    outcome.results = sum(kinds.values())
    outcome.by_kind = dict(kinds)
    if rejected:
        raise CheckFailed(f"{rejected} events rejected; none is out of a 1h retention")
    check_means(final, reference(cs, SIZE_MS, STEP_MS))
    outcome.notes = f"timeout every {ONE_TICK}, flush every {ONE_FLUSH} messages"
    return outcome


def simulate_cmd() -> list[str]:
    # The console script next to this interpreter (a pyenv shim would add ~0.4 s).
    local = Path(sys.executable).parent / "window-operator"
    exe = str(local) if local.is_file() else shutil.which("window-operator")
    if exe is not None:
        return [exe, "simulate"]
    return [sys.executable, "-m", "window_operator", "simulate"]


def run_simulate(config: Path, data: Path, output: Path) -> tuple[float, float, float, str]:
    """Run ``simulate``; return wall seconds, CPU seconds, peak RSS (MB) and its summary."""
    cmd = [*simulate_cmd(), "--config", str(config), "--input", str(data), "--output", str(output)]
    err_path = output.with_suffix(".stderr")
    with open(err_path, "wb") as err_file:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file)
        # wait4 gives the resources of exactly this child (RUSAGE_CHILDREN would mix runs).
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    err = err_path.read_text(errors="replace").strip()
    if code != 0:
        raise CheckFailed(f"simulate exited with {code}: {err}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, err


def scenario_simulate(n: int, keys: int, tmp: Path) -> Outcome:
    """Scenario d: the ``simulate`` command end to end over a JSONL file."""
    data = tmp / "clicks.jsonl"
    # Written by a helper process: Linux carries a parent's peak RSS over fork + exec
    # into the child's ru_maxrss, so this process must stay small until simulate runs.
    subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--write-jsonl",
            str(data),
            "--events",
            str(n),
            "--keys",
            str(keys),
        ],
        check=True,
    )
    config = tmp / "bench.yaml"
    config.write_bytes(json.dumps(job_doc("hopping", [COUNT, MEAN]), indent=2).encode())
    tiny = tmp / "tiny.jsonl"
    with open(data, "rb") as f:
        tiny.write_bytes(b"".join(f.readline() for _ in range(10)))
    # The fixed cost (interpreter, imports, RocksDB open/close) on a 10-line input.
    fixed, _, _, _ = run_simulate(config, tiny, tmp / "tiny-out.jsonl")
    output = tmp / "results.jsonl"
    seconds, cpu, rss, summary = run_simulate(config, data, output)
    outcome = Outcome("d", n, seconds, cpu, rss_mb=rss)
    cs = make_stream(n, keys)
    counts: dict[tuple[str, int], int] = {}
    means: dict[tuple[str, int], Any] = {}
    kinds: Counter[str] = Counter()
    with open(output, "rb") as f:
        for line in f:
            r = orjson.loads(line)
            kw = (r["key"], r["window_start"])
            kinds[r["kind"]] += 1
            counts[kw] = r["values"]["clicks"]
            means[kw] = r["values"]["mean_latency_ms"]
    outcome.results = sum(kinds.values())
    outcome.by_kind = dict(kinds)
    words = summary.split()
    outcome.rejected = int(words[words.index("rejected,") - 1]) if "rejected," in words else 0
    if outcome.rejected:
        raise CheckFailed(f"{outcome.rejected} lines rejected: {summary}")
    ref = reference(cs, SIZE_MS, STEP_MS)
    k = SIZE_MS // STEP_MS
    check_counts(counts, ref, k * n)
    check_means(means, ref)
    outcome.notes = (
        f"fixed cost {fixed:.2f}s (10-line run); "
        f"{n / max(seconds - fixed, 1e-9):,.0f} lines/s without it"
    )
    return outcome


def write_jsonl(path: Path, n: int, keys: int) -> None:
    """The click stream as JSON lines (the input of scenario d)."""
    cs = make_stream(n, keys)
    dumps = orjson.dumps
    with open(path, "wb") as f:
        for rec in cs.records():
            f.write(dumps(rec))
            f.write(b"\n")


def profile_simulate(n: int, keys: int, tmp: Path, profiler: cProfile.Profile) -> Outcome:
    """Scenario d in-process (``simulate()`` as the CLI calls it), for the profiler."""
    from window_operator.simulate import simulate

    data = tmp / "clicks.jsonl"
    write_jsonl(data, n, keys)
    runtime = build_runtime(parse_config(job_doc("hopping", [COUNT, MEAN]), base_dir=tmp))
    with open(tmp / "results.jsonl", "wb") as out:
        c0 = time.process_time()
        t0 = time.perf_counter()
        summary = profiler.runcall(simulate, runtime, data, out, state_dir=tmp / "state")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    outcome = Outcome("d", n, seconds, cpu, results=summary.results, rejected=summary.rejected)
    outcome.notes = "in-process simulate() (no interpreter start-up); not checked"
    return outcome


def run_scenario(
    name: str, args: argparse.Namespace, profiler: cProfile.Profile | None = None
) -> Outcome:
    with tempfile.TemporaryDirectory(prefix=f"bench-engine-{name}-", dir=args.tmpdir) as d:
        tmp = Path(d)
        if name in ("a", "b", "c", "e", "f"):
            outcome = scenario_batch(name, args.events, args.keys, tmp, profiler)
        elif name == "one":
            outcome = scenario_one(args.one_events, args.keys, tmp, profiler)
        elif profiler is not None:
            outcome = profile_simulate(args.events, args.keys, tmp, profiler)
        else:
            outcome = scenario_simulate(args.events, args.keys, tmp)
    if name != "d" or profiler is not None:
        outcome.rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return outcome


# ---------------------------------------------------------------------------- driver


def machine() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"machine: {cpu} ({platform.machine()}, {platform.system()}), "
        f"nproc={cpus}, Python {platform.python_version()} ({platform.python_implementation()}), "
        f"numpy {np.__version__}, pyarrow {version('pyarrow')}, rocksdict {version('rocksdict')}"
    )


def workload(args: argparse.Namespace) -> str:
    span_s = args.events / EVENTS_PER_SECOND
    return "\n".join(
        [
            f"workload: click_stream N={args.events:,} events, K={args.keys:,} keys (Zipf-like "
            f"skew), {EVENTS_PER_SECOND:,.0f} ev/s of event time ({span_s:,.0f} s),",
            f"  {OUT_OF_ORDER:.0%} out of order by 1..{MAX_DELAY_MS:,} ms; allowed_lateness 5s, "
            "retention 1h, late re-emission every 10s;",
            "  timers: timeout(max ts) after each batch; END_OF_TIME + flush at the end (timed);",
            f"  a/b/c: add_batch of {MICRO_BATCH:,} decoded events + flush per batch; "
            f"one: add_message, N={args.one_events:,}; d: simulate subprocess over JSONL",
        ]
    )


def run_best(name: str, args: argparse.Namespace) -> Outcome:
    """The fastest of ``--repeat`` runs (each in a fresh child); any failure wins."""
    best: Outcome | None = None
    for _ in range(args.repeat):
        o = run_child(name, args)
        if o.check != "ok":
            return o
        if best is None or o.seconds < best.seconds:
            best = o
    assert best is not None
    if args.repeat > 1:
        best.notes = f"best of {args.repeat}; " + best.notes
    return best


def run_child(name: str, args: argparse.Namespace) -> Outcome:
    """Run one scenario in a fresh interpreter (own heap, own peak RSS)."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--events",
        str(args.events),
        "--keys",
        str(args.keys),
        "--one-events",
        str(args.one_events),
    ]
    if args.tmpdir:
        cmd += ["--tmpdir", args.tmpdir]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        lines = proc.stdout.strip().splitlines()
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        return Outcome(name, 0, 0.0, check=f"FAILED: {reason}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return Outcome(**data)


def child_main(name: str, args: argparse.Namespace) -> int:
    try:
        outcome = run_scenario(name, args)
    except CheckFailed as exc:
        print(f"check FAILED in scenario {name}: {exc}")
        return 1
    print(json.dumps(asdict(outcome)))
    return 0


def print_table(outcomes: list[Outcome]) -> None:
    header = (
        f"{'':4} {'scenario':46} {'events':>10} {'wall s':>7} {'cpu s':>6} {'events/s':>11} "
        f"{'target':>10} {'met':>4} {'results':>8} {'peak RSS':>9}  check"
    )
    print(header)
    print("-" * len(header))
    for o in outcomes:
        target = TARGETS[o.name]
        met = "yes" if o.check == "ok" and o.rate >= target else "NO"
        rate = f"{o.rate:,.0f}" if o.seconds else "-"
        print(
            f"{o.name:4} {TITLES[o.name]:46} {o.events:>10,} {o.seconds:>7.2f} "
            f"{o.cpu_seconds:>6.2f} {rate:>11} "
            f"{target:>10,} {met:>4} {o.results:>8,} {o.rss_mb:>7.0f}MB  check: {o.check}"
        )
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(o.by_kind.items()))
        extra = [f"results: {kinds or '-'}", f"rejected {o.rejected}"]
        if o.late_events >= 0:
            extra.append(f"late events {o.late_events:,}")
        if o.name == "d":
            extra.append("rate in lines/s")
        if o.notes:
            extra.append(o.notes)
        print(f"{'':4}   " + "; ".join(extra))


def profile(name: str, args: argparse.Namespace, top: int, sort: str) -> Outcome:
    profiler = cProfile.Profile()
    outcome = run_scenario(name, args, profiler)
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats(sort).print_stats(top)
    print(f"\n=== cProfile of scenario {name} ({TITLES[name]}), timed part only, by {sort}")
    print(f"    {outcome.rate:,.0f} events/s under the profiler ({outcome.seconds:.2f} s)")
    print(f"    {outcome.results:,} results; {outcome.notes}")
    print(buf.getvalue().rstrip())
    return outcome


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--events", type=int, default=1_000_000, help="events of a, b, c and d")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    p.add_argument("--one-events", type=int, default=200_000, help="events of scenario one")
    p.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    p.add_argument("--repeat", type=int, default=1, help="runs per scenario; the best is shown")
    p.add_argument("--tmpdir", default=None, help="where the temporary RocksDB dirs go")
    p.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the selected scenarios in-process (d: simulate() without the CLI)",
    )
    p.add_argument("--top", type=int, default=25, help="profile entries to show")
    p.add_argument(
        "--sort", default="tottime", choices=("tottime", "cumulative"), help="profile order"
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--write-jsonl", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; choose from {','.join(SCENARIOS)}")
    args.only = only
    if min(args.events, args.keys, args.one_events, args.repeat) < 1:
        p.error("--events, --keys, --one-events and --repeat must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_jsonl:
        write_jsonl(Path(args.write_jsonl), args.events, args.keys)
        return 0
    if args.child:
        return child_main(args.child, args)
    print(machine())
    print(workload(args))
    print()
    outcomes: list[Outcome] = []
    for name in args.only:
        if args.profile:
            try:
                outcomes.append(profile(name, args, args.top, args.sort))
            except CheckFailed as exc:
                outcomes.append(Outcome(name, 0, 0.0, check=f"FAILED: {exc}"))
        else:
            print(f"running {name}: {TITLES[name]} ...", file=sys.stderr, flush=True)
            outcomes.append(run_best(name, args))
    if outcomes:
        print()
        print_table(outcomes)
    failed = [o.name for o in outcomes if o.check != "ok"]
    print()
    if failed:
        print(f"check: FAILED ({', '.join(failed)})")
        return 1
    print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
