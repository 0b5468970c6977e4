"""Soak: memory, store size and throughput of long runs where keys keep coming and going.

Run ``python benchmarks/bench_soak.py`` (options: ``--events N`` per run, default
20,000,000; ``--only time,session,join``; ``--dist new,zipf``; ``--batch B`` default
100,000; ``--points P`` report points per run, default 20; ``--cache-mb M``
(``state.cache_mb``); ``--plot FILE`` default ``soak.png``; ``--help``). Needs matplotlib
for the plot (``pip install -e '.[bench]'``); without it only the tables are printed.

Each run is a fresh child process over a fresh RocksDB on disk, through the library API:
``runtime.open_task``, then per micro-batch of ``B`` events ``add_batch``,
``timeout(max event time)``, ``take_result_batches`` and ``flush()`` (a commit). Event
time advances 100 s per micro-batch, so with retention 1 minute the live state is about
a minute of keys whatever the run's length. Input generation is not timed; events/s is
per CPU second of the process (RocksDB's threads included) over each report interval.

Operators (all with ``retention: 1m``, ``allowed_lateness: 1s``):

``time``     tumbling 10 s ``count`` + ``sum`` (the issue's measurement);
``session``  sessions with a 10 s gap, ``count`` + ``sum``;
``join``     inner join ``RANGE 10s``: half the events are orders, half shipments of
             those orders, 0..10 s later;
``time_full`` (only with ``--only``) ``time`` plus ``percentile(v, 0.5)``, a full-state
             operation: every event is a message in the store until its window fires.

Key distributions:

``new``   every event a new key (``user-N``), never seen again;
``zipf``  half the events from an unbounded population of long-lived keys with Zipf
          popularity (exponent 1.3: a few keys in every batch, a long tail seen now and
          then), half one-off keys.

The table shows, per report point, events processed, the peak RSS (``VmRSS``), the peak
of RocksDB's own memory (memtables, table readers and block cache, as it estimates them:
``TaskStore.memory``) and the peak size of the task's RocksDB directory over the interval
(all are read after every micro-batch: the write-ahead log and the memtables fill and
empty every few batches), events/s over the interval and the keys interned in memory. The
verdict line compares the last point with the one at a tenth of the run (2M of 20M):
RSS and store within 10 %, events/s (mean of the last three intervals against the three
after that point) within 10 %.

Each run's results are checked too (:class:`Tally`; not timed): the windows' latest
counts and sums add up to the events fed, and the join's pairs to the orders where every
key is new. Exit status 1 when a result check or a verdict fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from stores.rocks import StoreMemory
from window_operator.config import JobConfig, JoinJobConfig, parse_any_config
from window_operator.events import EventBatch
from window_operator.job import build_runtime
from window_operator.join import LEFT, RIGHT, JoinOperator, JoinRows, build_join_runtime
from window_operator.policies import END_OF_TIME

BASE_TS = 1_700_000_000_000
BATCH_SPAN_MS = 100_000
#: How long before the end of a batch's time a window's result is final (see Tally).
SETTLED_MS = 5_000
ZIPF_A = 1.3
OPERATORS = ("time", "session", "join")
DISTS = ("new", "zipf")


@dataclass(frozen=True, slots=True)
class Sample:
    """One report point of a run."""

    events: int
    rss_mb: float
    rocks_mb: float
    store_mb: float
    events_per_s: float
    keys: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """The goal check of a run: last point against the one at a tenth of the run."""

    rss: float
    store: float
    speed: float

    @property
    def ok(self) -> bool:
        return all(abs(r - 1.0) <= 0.10 for r in (self.rss, self.store)) and self.speed >= 0.9


# ---------------------------------------------------------------------- workloads


def _config(operator: str, state: str, cache_mb: int | None) -> JobConfig | JoinJobConfig:
    common: dict[str, Any] = {
        "watermark": {"allowed_lateness": "1s"},
        "retention": {"time": "1m"},
        "state": {"dir": state} | ({} if cache_mb is None else {"cache_mb": cache_mb}),
    }
    if operator == "join":
        doc: dict[str, Any] = {
            "job": "soak-join",
            "join": {
                "left": {"name": "orders", "timestamp": "ts"},
                "right": {"name": "shipments", "timestamp": "ts"},
                "on": ["id"],
                "range": "10s",
            },
        }
    else:
        window = (
            {"type": "session", "gap": "10s"}
            if operator == "session"
            else {"type": "tumbling", "size": "10s"}
        )
        aggregations: list[dict[str, Any]] = [
            {"name": "n", "op": "count"},
            {"name": "total", "op": "sum", "field": "v"},
        ]
        if operator == "time_full":
            aggregations.append(
                {"name": "p50", "op": "percentile", "field": "v", "params": {"q": 0.5}}
            )
        doc = {
            "job": f"soak-{operator}",
            "input": {"key": "user", "timestamp": "ts", "timestamp_unit": "ms"},
            "window": window,
            "aggregations": aggregations,
        }
    config = parse_any_config(doc | common, base_dir=Path("."))
    assert isinstance(config, JobConfig | JoinJobConfig)
    return config


class Keys:
    """Key ids of one run's batches (see the module doc for the distributions)."""

    def __init__(self, dist: str, seed: int = 11) -> None:
        self.dist = dist
        self.rng = np.random.default_rng(seed)
        self.next_new = 0

    def ids(self, n: int) -> list[str]:
        if self.dist == "new":
            return [f"user-{i}" for i in range(self.next_new, self._take(n))]
        hot = n // 2
        ranks = np.minimum(self.rng.zipf(ZIPF_A, hot), 10**12).tolist()
        out = [f"hot-{r}" for r in ranks]
        out += [f"user-{i}" for i in range(self.next_new, self._take(n - hot))]
        order = self.rng.permutation(n).tolist()
        return [out[i] for i in order]

    def _take(self, n: int) -> int:
        self.next_new += n
        return self.next_new


def _times(rng: np.random.Generator, b: int, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Event times of batch ``b``: spread over its 100 s, slightly out of order."""
    base = BASE_TS + b * BATCH_SPAN_MS
    ts = base + np.sort(rng.integers(0, BATCH_SPAN_MS, n))
    return ts + rng.integers(0, 500, n)


class Feed:
    """Builds the batches of one run and drives the operator with them."""

    def __init__(self, operator: str, dist: str, batch: int) -> None:
        self.operator = operator
        self.keys = Keys(dist)
        self.batch = batch
        self.rng = np.random.default_rng(5)
        self.offset = [0, 0]

    def make(self, b: int) -> list[Any]:
        """The inputs of batch ``b`` (built before the clock starts)."""
        n = self.batch
        if self.operator != "join":
            keys = self.keys.ids(n)
            ts = _times(self.rng, b, n)
            v = self.rng.random(n)
            return [EventBatch.from_columns(keys, ts, numeric={"v": v})]
        half = n // 2
        ids = self.keys.ids(half)
        l_ts = _times(self.rng, b, half)
        r_ts = l_ts + self.rng.integers(0, 10_000, half)
        order = np.argsort(r_ts, kind="stable")
        r_ids = [ids[i] for i in order.tolist()]
        return [
            self._rows(LEFT, ids, l_ts),
            self._rows(RIGHT, r_ids, r_ts[order]),
        ]

    def _rows(self, side: int, ids: list[str], ts: np.ndarray[Any, Any]) -> JoinRows:
        # exact-size copies: orjson's buffers are larger than their bytes
        payload = [
            bytes(memoryview(orjson.dumps({"id": k, "ts": t})))
            for k, t in zip(ids, ts.tolist(), strict=True)
        ]
        off = np.arange(self.offset[side], self.offset[side] + len(ids), dtype=np.int64)
        self.offset[side] += len(ids)
        return JoinRows.from_columns(ids, ts, payload, source=side, offset=off)


class Tally:
    """The result check: what the results say was applied, against what was fed.

    Window operators: the latest result of every window (an ``EARLY``, ``ON_TIME`` or
    ``LATE`` result replaces the window's last one, a ``RETRACT`` withdraws it), summed
    once the window can change no more (it ends :data:`SETTLED_MS` before the end of
    the batch's time: the lateness is 1 s, the disorder 0.5 s, a session's gap 10 s, and
    the next batch's events all come after that end); after the run every window is
    fired (end of input). Their counts
    must add up to the events fed, and their sums to the sum of ``v``, with no error
    record (no event of this feed is out of retention). Join: with every key new, each
    order has exactly one shipment within the range, so the pairs must be the orders;
    with Zipf keys the pairs are not counted (no oracle here), only the errors.
    Held in memory: the windows of the batch's last :data:`SETTLED_MS`, which stay in
    the readings of the run (about 1 MB with every key new).
    """

    def __init__(self, operator: str, dist: str) -> None:
        self.operator = operator
        self.dist = dist
        self.fed = 0
        self.fed_sum = 0.0
        self.errors = 0
        self.live: dict[tuple[str, int, int], tuple[int, float]] = {}
        self.count = 0
        self.total = 0.0
        #: windows ending before this were summed and dropped
        self.settled_before = -(2**63)
        #: results (or RETRACTs) of windows after they were summed
        self.resettled = 0

    def feed(self, inputs: list[Any]) -> None:
        self.fed += len(inputs[0])  # the events, or the join's orders
        if self.operator != "join":
            self.fed_sum += float(np.sum(inputs[0].numeric["v"]))

    def take(self, batches: list[Any], errors: int, settled_before: int) -> None:
        """Results and errors handed over; windows ending before ``settled_before``
        are summed and dropped."""
        self.errors += errors
        for rb in batches:
            if self.operator == "join":
                self.count += len(rb) if rb.kind == "MATCH" else -len(rb)
                continue
            windows = list(
                zip(rb.keys, rb.window_start.tolist(), rb.window_end.tolist(), strict=True)
            )
            # a result or RETRACT of a window already summed: the settling is wrong
            self.resettled += sum(1 for w in windows if w[2] < self.settled_before)
            if rb.kind == "RETRACT":  # its values are empty (see session/emitter.py)
                for w in windows:
                    self.live.pop(w, None)
            else:
                values = zip(rb.values["n"], rb.values["total"], strict=True)
                self.live.update(zip(windows, values, strict=True))
        self.settled_before = settled_before
        settled = [w for w in self.live if w[2] < settled_before]
        for w in settled:
            n, t = self.live.pop(w)
            self.count += int(n)
            self.total += float(t)

    def failures(self) -> list[str]:
        """What the results got wrong (empty: they are exact)."""
        out = [f"{self.errors:,} error records"] if self.errors else []
        if self.operator == "join":
            if self.dist == "new" and self.count != self.fed:
                out.append(f"{self.count:,} pairs for {self.fed:,} orders")
            return out
        if self.live:
            out.append(f"{len(self.live):,} windows never settled")
        if self.resettled:
            out.append(f"{self.resettled:,} results of windows already summed")
        if self.count != self.fed:
            out.append(f"windows count {self.count:,} events of {self.fed:,} fed")
        if abs(self.total - self.fed_sum) > 1e-9 * max(abs(self.fed_sum), 1.0):
            out.append(f"windows sum to {self.total!r}, the events to {self.fed_sum!r}")
        return out


def _interned(op: Any) -> int:
    if isinstance(op, JoinOperator):
        return len(op.keys)
    cache = getattr(op, "cache", None)
    return len(cache.keys) if cache is not None else len(op.keys)


def _rocks_mb(memory: StoreMemory) -> float:
    return (memory.memtables + memory.table_readers + memory.block_cache) / 2**20


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------- one run


def run_one(
    operator: str, dist: str, events: int, batch: int, points: int, cache_mb: int | None
) -> tuple[list[Sample], list[str]]:
    """One run in this process; prints each report point as it is reached. Returns the
    samples and what the result check found wrong."""
    feed = Feed(operator, dist, batch)
    tally = Tally(operator, dist)
    n_batches = max(events // batch, 1)
    every = max(n_batches // points, 1)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix=f"soak-{operator}-") as tmp:
        config = _config(operator, tmp, cache_mb)
        if isinstance(config, JoinJobConfig):
            op: Any = build_join_runtime(config).open_task(Path(tmp))
        else:
            op = build_runtime(config).open_task(Path(tmp))
        cpu, done, rss, rocks, store = 0.0, 0, 0.0, 0.0, 0.0
        for b in range(n_batches):
            inputs = feed.make(b)
            tally.feed(inputs)
            c0 = time.process_time()
            for inp in inputs:
                op.add_batch(inp)
            op.timeout(BASE_TS + (b + 1) * BATCH_SPAN_MS)
            batches, errors = op.take_result_batches(), op.get_errors()
            op.flush()
            cpu += time.process_time() - c0
            tally.take(batches, len(errors), BASE_TS + (b + 1) * BATCH_SPAN_MS - SETTLED_MS)
            del batches, errors
            # peaks within the interval: the write-ahead log and memtables fill and empty
            # every few batches, so single readings depend on where in that cycle they fall
            rss = max(rss, _rss_mb())
            rocks = max(rocks, _rocks_mb(op.store.memory()))
            store = max(store, op.store.size_on_disk() / 2**20)
            if (b + 1) % every == 0 or b + 1 == n_batches:
                n = (b + 1) * batch
                s = Sample(n, rss, rocks, store, (n - done) / max(cpu, 1e-9), _interned(op))
                samples.append(s)
                print(f"    {_row(s)}", flush=True)
                cpu, done, rss, rocks, store = 0.0, n, 0.0, 0.0, 0.0
        op.timeout(END_OF_TIME)  # end of input: every window fires
        tally.take(op.take_result_batches(), len(op.get_errors()), END_OF_TIME)
        op.close()
    return samples, tally.failures()


# ---------------------------------------------------------------------- report


def _row(s: Sample) -> str:
    return (
        f"| {s.events:>12,} | {s.rss_mb:>8,.0f} MB | {s.rocks_mb:>8,.1f} MB "
        f"| {s.store_mb:>8,.1f} MB "
        f"| {s.events_per_s:>10,.0f} | {s.keys:>9,} |"
    )


HEADER = (
    "|       events |      RSS |  RocksDB mem |  RocksDB dir |   events/s |      keys |\n"
    "|---|---|---|---|---|---|"
)


def verdict(samples: list[Sample]) -> Verdict | None:
    """Last point against the one at a tenth of the run (see module doc)."""
    if len(samples) < 8:
        return None
    ref = max(len(samples) // 10, 1) - 1
    last = samples[-1]
    start_speed = np.mean([s.events_per_s for s in samples[ref + 1 : ref + 4]])
    end_speed = np.mean([s.events_per_s for s in samples[-3:]])
    return Verdict(
        rss=last.rss_mb / samples[ref].rss_mb,
        store=last.store_mb / max(samples[ref].store_mb, 1e-9),
        speed=float(end_speed / start_speed),
    )


def plot(runs: dict[str, list[Sample]], path: Path) -> bool:
    """RSS, store size and events/s against events processed, one line per run."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')")
        return False
    fig, axes = plt.subplots(4, 1, figsize=(9, 14), sharex=True)
    fields = (
        ("rss_mb", "RSS (MB)"),
        ("rocks_mb", "RocksDB memory (MB)"),
        ("store_mb", "RocksDB dir (MB)"),
        ("events_per_s", "events/s"),
    )
    for ax, (field, label) in zip(axes, fields, strict=True):
        for name, samples in runs.items():
            xs = [s.events / 1e6 for s in samples]
            ax.plot(xs, [getattr(s, field) for s in samples], marker=".", label=name)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    axes[0].legend(loc="upper left", fontsize="small", ncol=2)
    axes[-1].set_xlabel("events processed (millions)")
    fig.suptitle("window-operator soak: churning keys, retention 1 minute")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def _child(args: argparse.Namespace, operator: str, dist: str) -> tuple[list[Sample], list[str]]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            f"{operator}:{dist}:{out.name}",
            "--events",
            str(args.events),
            "--batch",
            str(args.batch),
            "--points",
            str(args.points),
        ]
        if args.cache_mb is not None:
            cmd += ["--cache-mb", str(args.cache_mb)]
        subprocess.run(cmd, check=True)
        got = json.loads(Path(out.name).read_text())
        return [Sample(**d) for d in got["samples"]], got["wrong"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--only", default=",".join(OPERATORS))
    ap.add_argument("--dist", default=",".join(DISTS))
    ap.add_argument("--cache-mb", type=int, default=None)
    ap.add_argument("--plot", type=Path, default=Path("soak.png"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        operator, dist, out = args.child.split(":", 2)
        samples, wrong = run_one(
            operator, dist, args.events, args.batch, args.points, args.cache_mb
        )
        Path(out).write_text(json.dumps({"samples": [asdict(s) for s in samples], "wrong": wrong}))
        return
    runs: dict[str, list[Sample]] = {}
    failed: list[str] = []
    for operator in args.only.split(","):
        for dist in args.dist.split(","):
            name = f"{operator} / {dist}"
            print(f"{name}: {args.events:,} events in batches of {args.batch:,}")
            runs[name], wrong = _child(args, operator, dist)
            print(f"  results: {'; '.join(wrong) if wrong else 'exact'}")
            failed += [f"{name}: {w}" for w in wrong]
    print()
    for name, samples in runs.items():
        print(f"### {name}\n\n{HEADER}")
        for s in samples:
            print(_row(s))
        v = verdict(samples)
        if v is not None:
            print(
                f"\nlast / at {samples[max(len(samples) // 10, 1) - 1].events:,} events: "
                f"RSS x{v.rss:.3f}, store x{v.store:.3f}, events/s x{v.speed:.3f} "
                f"-> {'within 10%' if v.ok else 'NOT within 10%'}\n"
            )
            if not v.ok:
                failed.append(f"{name}: not within 10 %")
    if plot(runs, args.plot):
        print(f"plot: {args.plot}")
    if failed:
        print("FAILED: " + "; ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
