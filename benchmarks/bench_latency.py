"""End-to-end latency of a window result, and the highest steady rate without growing lag:
this job (through its keyed exchange) next to Spark's own windowing, in one run.

Run ``python benchmarks/bench_latency.py`` (one trial of each contender at 50,000 events/s
for 60 s) or ``--sweep`` (both contenders at 25k, 50k, 100k and 150k events/s, 30 s each:
which rates each sustains). Options: ``--rate``, ``--seconds``, ``--keys`` (1,000),
``--partitions`` (4), ``--window`` (tumbling size, 1s), ``--lateness`` (1s), ``--trigger``
(1s), ``--guarantee`` (exactly_once), ``--repeat``, ``--only A,B``, ``--sweep-rates``,
``--sweep-seconds``, ``--warmup`` (seconds of each trial not measured, 8), ``--tmpdir``.
Exit status 1 when this job's results are wrong or missing.

Load: a producer of its own (a separate process) writes JSON events
``{"page": "k17", "ts": <wall clock ms at production>, "latency_ms": i % 1000}`` at a
steady rate, round-robin over the partitions (not keyed by the grouping key), keys
``k0 .. k{K-1}`` in turn. Every trial gets a fresh local broker; the input topic keeps
records for 30 s only (``retention.ms``: the broker slows down with millions of records)
and, like the output topics, stamps records with their append time (``LogAppendTime``).

The job: a tumbling window, ``count`` + ``mean(latency_ms)`` per page, allowed lateness
``L``, processing-time trigger. **A** is this job (``StreamingJob``: Kafka -> map side ->
keyed exchange -> state tasks with RocksDB and changelogs -> results to Kafka, exactly
once by default); **A-long** the same job in its long-running shape (``spark.mode:
long_running``: workers that stay up, state tasks committing every trigger interval).
**B** is Spark's own ``groupBy(window(size), page).agg(count, avg)`` with
``withWatermark(L)``, append mode (the mode that emits only final windows), reading the
same kind of input through the project's Kafka source and writing each micro-batch's
rows to Kafka with a confluent-kafka producer from ``foreachBatch`` (Spark's Kafka sink
jar is not available here).

Latency of a window ``[W - size, W)``: from ``T_W``, the earliest append time at which
every input partition holds an event with event time ``>= W + L`` (the event that moves
the watermark past the window's end; taken from the producer's delivery reports, which
carry the broker's append time), to the append time of the window's last ``ON_TIME``
result record in the output topic (``appended``), and to the moment a ``read_committed``
consumer polling the output topic received it (``visible``: for A the end of the task's
transaction). Windows ending in the first ``--warmup`` seconds are not counted. The
results of every measured window are checked against counts and means computed from what
was produced.

Lag, sampled every second: the input's end offsets minus the offsets the query last
committed (its ``lastProgress``). A rate is *sustained* when the lag does not grow over
the second half of the trial (least-squares slope below 5 % of the input rate) and the
producer kept its schedule; a trial whose lag passes 10 s of input is stopped early.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import orjson

INPUT_RETENTION_MS = 30_000
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
ABORT_LAG_S = 10.0
SUSTAINED_GROWTH = 0.05
MEAN_RTOL = 1e-9
DRAIN_TIMEOUT_S = 60.0
WARM_TIMEOUT_S = 180.0
SAMPLE_S = 1.0
SPAWN = multiprocessing.get_context("spawn")


def now_ms() -> float:
    return time.time() * 1000.0


# ------------------------------------------------------------------------ the load


@dataclass(frozen=True)
class Load:
    """What a trial's producer writes."""

    bootstrap: str
    topic: str
    rate: float
    seconds: float
    partitions: int
    keys: int
    size_ms: int
    lateness_ms: int


@dataclass
class Produced:
    """What the producer did: its window boundaries and the events that closed them."""

    start_ms: float
    end_ms: float
    sent: int
    behind_s: float
    #: window end W -> partition -> (append time ms, offset) of the partition's first
    #: event with event time >= W + lateness
    closers: dict[int, dict[int, tuple[int, int]]]
    #: window start -> index of its first event (event times never go back)
    firsts: dict[int, int]

    @property
    def rate(self) -> float:
        return self.sent * 1000.0 / max(self.end_ms - self.start_ms, 1.0)

    def closed_at(self, window_end: int, partitions: int) -> int | None:
        """``T_W``: when every partition held an event at or past the window's end."""
        parts = self.closers.get(window_end, {})
        if len(parts) < partitions:
            return None
        return max(t for t, _ in parts.values())


def produce_steady(load: Load, conn: Connection, go: Any, stop: Any) -> None:
    """Process body: once ``go`` is set, produce at ``load.rate`` for ``load.seconds``;
    send :class:`Produced`."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": load.bootstrap,
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    closers: dict[int, dict[int, tuple[int, int]]] = {}

    def closer(window_end: int) -> Callable[[Any, Any], None]:
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                parts = closers.setdefault(window_end, {})
                parts[msg.partition()] = (int(msg.timestamp()[1]), int(msg.offset()))

        return delivered

    conn.send("ready")
    go.wait()
    produced = _produce_loop(producer, load, closer, stop)
    producer.flush(60)
    produced.closers = closers
    conn.send(produced)


def _produce_loop(
    producer: Any, load: Load, closer: Callable[[int], Callable[[Any, Any], None]], stop: Any
) -> Produced:
    """The paced loop (the closers are filled in by the delivery reports)."""
    keys = [b"k%d" % k for k in range(load.keys)]
    size, lateness, parts, topic = load.size_ms, load.lateness_ms, load.partitions, load.topic
    last_bucket: list[int | None] = [None] * parts
    firsts: dict[int, int] = {}
    current_window = None
    i, last_ts, behind = 0, 0, 0.0
    start_ms = now_ms()
    t0 = time.perf_counter()
    while not stop.is_set():
        elapsed = time.perf_counter() - t0
        if elapsed >= load.seconds:
            break
        due = int(elapsed * load.rate) + 1
        behind = max(behind, (due - i) / load.rate)
        while i < due:
            ts = max(time.time_ns() // 1_000_000, last_ts)
            last_ts = ts
            part = i % parts
            if ts // size != current_window:
                current_window = ts // size
                firsts[current_window * size] = i
            value = b'{"page":"%b","ts":%d,"latency_ms":%d}' % (keys[i % load.keys], ts, i % 1000)
            bucket = (ts - lateness) // size
            callback = None
            if bucket != last_bucket[part]:
                if last_bucket[part] is not None:
                    callback = closer(bucket * size)
                last_bucket[part] = bucket
            while True:
                try:
                    producer.produce(topic, value, partition=part, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.01)
            i += 1
        producer.poll(0)
        time.sleep(0.001)
    return Produced(start_ms, now_ms(), i, behind, {}, firsts)


# ------------------------------------------------------------------------ the results


@dataclass(frozen=True)
class Seen:
    """One ON_TIME result record of the output topic."""

    window_end: int
    key: str
    count: int
    mean: float
    appended_ms: int
    seen_ms: float


def watch_results(bootstrap: str, topic: str, partitions: int, conn: Connection, stop: Any) -> None:
    """Process body: read ``topic`` (read_committed) as it is written; send the ON_TIMEs."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-latency-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[Seen] = []
    conn.send("ready")
    while not stop.is_set():
        msgs = consumer.consume(10_000, timeout=0.02)
        at = now_ms()
        for m in msgs:
            if m.error() is not None or m.value() is None:
                continue
            doc = orjson.loads(m.value())
            if doc.get("kind") != "ON_TIME":
                continue
            values = doc["values"]
            seen.append(
                Seen(
                    int(doc["window_end"]),
                    str(doc["key"]),
                    int(values["events"]),
                    float(values["mean"]) if values["mean"] is not None else float("nan"),
                    int(m.timestamp()[1]),
                    at,
                )
            )
    consumer.close()
    conn.send(seen)


# ------------------------------------------------------------------------ contenders


@dataclass
class Contender:
    """A started streaming query, and how to stop it."""

    query: Any
    stop: Callable[[], None]
    output_topic: str
    reports: list[tuple[float, Any]] = field(default_factory=list)


def start_ours(
    spark: Any, load: Load, tmp: Path, args: argparse.Namespace, mode: str = "micro_batch"
) -> Contender:
    """A: the window job on the input topic (A-long: in its long-running shape)."""
    from window_operator.config import parse_config
    from window_operator.kafka_admin import KafkaAdmin
    from window_operator.spark.longrun import LongRunningJob, job_for

    job = f"lat-a-{uuid.uuid4().hex[:8]}"
    doc: dict[str, Any] = {
        "job": job,
        "input": {"topic": load.topic, "key": "page", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": f"{load.size_ms}ms"},
        "aggregations": [
            {"name": "events", "op": "count"},
            {"name": "mean", "op": "mean", "field": "latency_ms"},
        ],
        "watermark": {"allowed_lateness": f"{load.lateness_ms}ms"},
        "output": {"topic": f"{job}-windows"},
        "state": {"dir": str(tmp / job / "state")},
        "processing": {"guarantee": args.guarantee},
        "spark": {"trigger": f"{args.trigger_ms}ms", "mode": mode},
    }
    config = parse_config(doc, base_dir=tmp)
    # created here with append-time stamps (the job would create it without them)
    KafkaAdmin(load.bootstrap).create_topic(
        config.output.topic,
        load.partitions,
        {"cleanup.policy": "compact", "retention.ms": "-1", **APPEND_TIME},
    )
    contender = Contender(None, lambda: None, config.output.topic)
    job = job_for(
        config,
        bootstrap_servers=load.bootstrap,
        spark=spark,
        on_report=lambda r: contender.reports.append((now_ms(), r)),
    )
    job.start()
    if isinstance(job, LongRunningJob):
        contender.query = LongRunningProgress(job, contender, load.topic)
    else:
        contender.query = job.query
    contender.stop = job.stop
    return contender


class LongRunningProgress:
    """What the trial reads of a streaming query (``lastProgress``, ``exception``), for
    a long-running job: its epochs count as batches, its committed offsets are the ends
    of the ranges its workers reported."""

    def __init__(self, job: Any, contender: Contender, topic: str) -> None:
        self.job, self.contender, self.topic = job, contender, topic
        self.recentProgress: list[Any] = []

    @property
    def lastProgress(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        ends: dict[str, int] = {}
        for _, report in list(self.contender.reports):
            for m in report.ranges:
                key = str(m.range.partition)
                ends[key] = max(ends.get(key, 0), m.range.end)
        return {
            "batchId": len(self.contender.reports) - 1,
            "sources": [{"endOffset": {self.topic: ends}}],
        }

    def exception(self) -> Any:
        return self.job.error


class SparkSink:
    """B's ``foreachBatch``: the batch's final windows to Kafka, one JSON record each."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        rows = batch_df.select(
            "page",
            F.unix_millis(F.col("window.start")).alias("s"),
            F.unix_millis(F.col("window.end")).alias("e"),
            "events",
            "mean",
        ).collect()
        for r in rows:
            key = orjson.dumps({"key": r.page, "window_start": r.s, "window_end": r.e})
            value = orjson.dumps(
                {
                    "key": r.page,
                    "window_start": r.s,
                    "window_end": r.e,
                    "kind": "ON_TIME",
                    "update_seq": 0,
                    "values": {"events": r.events, "mean": r.mean},
                }
            )
            while True:
                try:
                    self.producer.produce(self.topic, value, key=key)
                    break
                except BufferError:
                    self.producer.poll(0.01)
        if self.producer.flush(60):
            raise RuntimeError("B's results were not acknowledged")


def start_spark(spark: Any, load: Load, tmp: Path, args: argparse.Namespace) -> Contender:
    """B: Spark's windowed aggregation, append mode, results to Kafka from foreachBatch."""
    from pyspark.sql import functions as F

    from window_operator.kafka_admin import KafkaAdmin
    from window_operator.spark.kafka_source import read_kafka_stream

    topic = f"lat-b-{uuid.uuid4().hex[:8]}-windows"
    KafkaAdmin(load.bootstrap).create_topic(topic, load.partitions, APPEND_TIME)
    df = read_kafka_stream(
        spark,
        bootstrap_servers=load.bootstrap,
        topics=[load.topic],
        starting_offsets="earliest",
        ranges=False,
    )
    schema = "page string, ts long, latency_ms double"
    events = df.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select(
        F.col("e.page").alias("page"),
        F.timestamp_millis(F.col("e.ts")).alias("event_time"),
        F.col("e.latency_ms").alias("latency_ms"),
    )
    windows = (
        events.withWatermark("event_time", f"{load.lateness_ms} milliseconds")
        .groupBy(F.window("event_time", f"{load.size_ms} milliseconds"), "page")
        .agg(F.count("*").alias("events"), F.avg("latency_ms").alias("mean"))
    )
    query = (
        windows.writeStream.outputMode("append")
        .foreachBatch(SparkSink(load.bootstrap, topic))
        .option("checkpointLocation", str(tmp / f"{topic}-checkpoint"))
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )
    return Contender(query, query.stop, topic)


# ------------------------------------------------------------------------ one trial


@dataclass
class Trial:
    """One contender at one rate: what was produced, seen, and how the lag went."""

    name: str
    load: Load
    produced: Produced
    seen: list[Seen]
    lag: list[tuple[float, int]]
    progress: list[dict[str, Any]]
    reports: list[tuple[float, Any]]
    aborted: bool
    load_avg: tuple[float, float]


class Committed:
    """The input's end offsets and what a query committed (its last progress)."""

    def __init__(self, load: Load, query: Any) -> None:
        from window_operator.kafka_admin import KafkaAdmin

        self.admin = KafkaAdmin(load.bootstrap)
        self.parts = [(load.topic, p) for p in range(load.partitions)]
        self.query = query
        self.topic = load.topic

    def ends(self) -> dict[int, int]:
        got = self.admin.list_offsets(self.parts, earliest=False, read_committed=False)
        return {p: o for (_, p), o in got.items()}

    def committed(self) -> dict[int, int]:
        progress = self.query.lastProgress
        if not progress or not progress.get("sources"):
            return {}
        return end_offsets(progress["sources"][0], self.topic)

    def lag(self) -> int:
        done = self.committed()
        return sum(max(0, end - done.get(p, 0)) for p, end in self.ends().items())


def end_offsets(source: dict[str, Any], topic: str) -> dict[int, int]:
    """``{partition: offset}`` of a progress source's ``endOffset`` (a JSON string or dict)."""
    raw = source.get("endOffset")
    doc = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
    return {int(p): int(o) for p, o in (doc or {}).get(topic, {}).items()}


def run_trial(
    name: str,
    spark: Any,
    rate: float,
    seconds: float,
    tmp: Path,
    args: argparse.Namespace,
    brokers: list[Any],
) -> Trial:
    """A fresh broker and topic, the contender's query, the producer and the watcher."""
    from window_operator.broker import LocalBroker
    from window_operator.kafka_admin import KafkaAdmin

    where = tmp / f"{name}-{uuid.uuid4().hex[:6]}"
    broker = LocalBroker(data_dir=where / "broker")
    broker.start()
    # stopped at the very end: Spark's Python workers keep their producers to it
    brokers.append(broker)
    load = Load(
        broker.bootstrap_servers, "events", rate, seconds, args.partitions, args.keys,
        args.window_ms, args.lateness_ms,
    )  # fmt: skip
    KafkaAdmin(load.bootstrap).create_topic(
        load.topic, load.partitions, {"retention.ms": str(INPUT_RETENTION_MS), **APPEND_TIME}
    )
    if name == "B":
        contender = start_spark(spark, load, where, args)
    else:
        mode = "long_running" if name == "A-long" else "micro_batch"
        contender = start_ours(spark, load, where, args, mode)
    try:
        return drive(name, contender, load)
    finally:
        contender.stop()


def drive(name: str, contender: Contender, load: Load) -> Trial:
    """Run the producer and the watcher against a started query; sample the lag."""
    go, stop_producer, stop_watcher = SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    p_here, p_there = SPAWN.Pipe()
    w_here, w_there = SPAWN.Pipe()
    watcher = SPAWN.Process(
        target=watch_results,
        args=(load.bootstrap, contender.output_topic, load.partitions, w_there, stop_watcher),
    )
    producer = SPAWN.Process(target=produce_steady, args=(load, p_there, go, stop_producer))
    watcher.start()
    producer.start()
    committed = Committed(load, contender.query)
    warm_up(load, committed)
    w_here.recv()
    p_here.recv()
    load_start = os.getloadavg()[0]
    go.set()
    lag: list[tuple[float, int]] = []
    aborted = False
    t0 = time.monotonic()
    while not p_here.poll(SAMPLE_S):
        behind = committed.lag()
        lag.append((time.monotonic() - t0, behind))
        if behind > ABORT_LAG_S * load.rate and not aborted:
            aborted = True
            stop_producer.set()
    produced: Produced = p_here.recv()
    producer.join()
    drain(committed, contender)
    time.sleep(1.0)
    stop_watcher.set()
    seen: list[Seen] = w_here.recv()
    watcher.join()
    progress = [orjson.loads(p.json) for p in contender.query.recentProgress]
    return Trial(
        name, load, produced, seen, lag, progress, list(contender.reports), aborted,
        (load_start, os.getloadavg()[0]),
    )  # fmt: skip


def warm_up(load: Load, committed: Committed) -> None:
    """One event per partition, processed before the timed load starts (Python workers
    spawned, plans compiled); dated before the windows that are measured."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": load.bootstrap})
    value = b'{"page":"warm","ts":%d,"latency_ms":0}' % int(now_ms())
    for p in range(load.partitions):
        producer.produce(load.topic, value, partition=p)
    producer.flush(30)
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while time.monotonic() < deadline:
        done = committed.committed()
        if len(done) == load.partitions and all(o >= 1 for o in done.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the query did not process its first events in {WARM_TIMEOUT_S:.0f}s")


def drain(committed: Committed, contender: Contender) -> None:
    """Wait until the query committed the whole input, and one more batch ran after it."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    ends = committed.ends()
    while time.monotonic() < deadline:
        if contender.query.exception() is not None:
            raise RuntimeError(f"the query failed: {contender.query.exception()}")
        done = committed.committed()
        if all(done.get(p, 0) >= e for p, e in ends.items()):
            break
        time.sleep(0.2)
    # B emits a window one batch after the batch that moved its watermark
    batch = (contender.query.lastProgress or {}).get("batchId", -1)
    while time.monotonic() < deadline:
        if (contender.query.lastProgress or {}).get("batchId", -1) > batch:
            return
        time.sleep(0.2)


# ------------------------------------------------------------------------ analysis


@dataclass(frozen=True)
class WindowLatency:
    """One measured window."""

    window_end: int
    closed_ms: int
    appended_ms: int
    visible_ms: float
    first_appended_ms: int

    @property
    def appended(self) -> float:
        return (self.appended_ms - self.closed_ms) / 1000.0

    @property
    def visible(self) -> float:
        return (self.visible_ms - self.closed_ms) / 1000.0


@dataclass
class Measured:
    """A trial's windows: latencies, and what the check found."""

    windows: list[WindowLatency]
    missing: list[int]
    wrong: list[str]


def measure(trial: Trial, warmup_s: float) -> Measured:
    """Latency of every window closed after the warm-up, and its results checked."""
    load, prod = trial.load, trial.produced
    by_window: dict[int, dict[str, Seen]] = {}
    for s in trial.seen:
        first = by_window.setdefault(s.window_end, {}).get(s.key)
        if first is None or s.appended_ms < first.appended_ms:
            by_window[s.window_end][s.key] = s
    start = prod.start_ms + warmup_s * 1000.0
    ends = sorted(
        w for w in prod.closers if w - load.size_ms >= start and w - load.size_ms in prod.firsts
    )
    out = Measured([], [], [])
    for w in ends:
        closed = prod.closed_at(w, load.partitions)
        if closed is None:
            continue
        results = by_window.get(w)
        if not results:
            out.missing.append(w)
            continue
        out.wrong += check_window(prod, load, w, results)
        out.windows.append(
            WindowLatency(
                w,
                closed,
                max(r.appended_ms for r in results.values()),
                max(r.seen_ms for r in results.values()),
                min(r.appended_ms for r in results.values()),
            )
        )
    return out


def check_window(prod: Produced, load: Load, window_end: int, got: dict[str, Seen]) -> list[str]:
    """The window's counts and means against what was produced (empty: all right)."""
    start = window_end - load.size_ms
    later = [s for s in prod.firsts if s > start]
    i0, i1 = prod.firsts[start], prod.firsts[min(later)] if later else prod.sent
    idx = np.arange(i0, i1)
    counts = np.bincount(idx % load.keys, minlength=load.keys)
    sums = np.bincount(
        idx % load.keys, weights=(idx % 1000).astype(np.float64), minlength=load.keys
    )
    want = {f"k{k}": (int(counts[k]), sums[k] / counts[k]) for k in range(load.keys) if counts[k]}
    problems = []
    if want.keys() != got.keys():
        problems.append(
            f"window ending {window_end}: {len(want.keys() - got.keys())} keys missing, "
            f"{len(got.keys() - want.keys())} unexpected"
        )
    for key in want.keys() & got.keys():
        count, mean = want[key]
        r = got[key]
        if r.count != count or not np.isclose(r.mean, mean, rtol=MEAN_RTOL, atol=0.0):
            problems.append(
                f"window ending {window_end}, {key}: count {r.count} mean {r.mean} "
                f"!= {count} {mean}"
            )
    return problems


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


@dataclass(frozen=True)
class LagVerdict:
    """Whether a trial sustained its rate."""

    sustained: bool
    growth: float  # lag growth over the second half, as a fraction of the input rate
    final_s: float  # lag at the end of the run, in seconds of input
    processed_rate: float

    def text(self) -> str:
        word = "sustained" if self.sustained else "NOT sustained"
        return (
            f"{word}: lag grows {self.growth * 100:+.1f}% of the rate, "
            f"{self.final_s:.1f} s of input behind at the end"
        )


def lag_verdict(trial: Trial, warmup_s: float) -> LagVerdict:
    """The least-squares slope of the lag over the second half of the trial."""
    rate = trial.load.rate
    samples = [(t, n) for t, n in trial.lag if t >= warmup_s]
    half = samples[len(samples) // 2 :] if len(samples) >= 4 else samples
    growth = 0.0
    if len(half) >= 2:
        t = np.array([s[0] for s in half])
        n = np.array([s[1] for s in half], dtype=np.float64)
        growth = float(np.polyfit(t, n, 1)[0]) / rate
    final = trial.lag[-1][1] / rate if trial.lag else 0.0
    kept_schedule = trial.produced.rate >= 0.97 * rate and trial.produced.behind_s < 2.0
    seconds = max((trial.produced.end_ms - trial.produced.start_ms) / 1000.0, 1e-9)
    processed = (trial.produced.sent - (trial.lag[-1][1] if trial.lag else 0)) / seconds
    sustained = not trial.aborted and growth < SUSTAINED_GROWTH and kept_schedule
    return LagVerdict(sustained, growth, final, processed)


# ------------------------------------------------------------------------ where time goes


@dataclass(frozen=True)
class Batch:
    """A micro-batch from the query's progress: when it ran and what it covered."""

    batch_id: int
    start_ms: float
    seconds: float
    ends: dict[int, int]
    durations: dict[str, float]

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.seconds * 1000.0


def batches_of(trial: Trial) -> list[Batch]:
    out = []
    for p in trial.progress:
        if not p.get("sources"):
            continue
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        durations = {k: v / 1000.0 for k, v in p.get("durationMs", {}).items()}
        out.append(
            Batch(
                int(p["batchId"]),
                start,
                durations.get("triggerExecution", 0.0),
                end_offsets(p["sources"][0], trial.load.topic),
                durations,
            )
        )
    return sorted(out, key=lambda b: b.batch_id)


def reading_batch(batches: list[Batch], trial: Trial, window_end: int) -> Batch | None:
    """The first batch that read every partition's closing event of a window."""
    closers = trial.produced.closers.get(window_end, {})
    for b in batches:
        if all(b.ends.get(p, 0) > off for p, (_, off) in closers.items()):
            return b
    return None


def where_time_goes(trial: Trial, measured: Measured, trigger_ms: int) -> list[str]:
    """A window's latency split: trigger wait, the batches to its result, visibility."""
    if trial.name == "A-long":
        return epoch_profile(trial, measured)
    batches = batches_of(trial)
    rows: dict[str, list[float]] = {
        "closing event -> next trigger tick": [],
        "tick -> start of the batch that read it (previous batch still running)": [],
        "start of that batch -> last result appended": [],
        "last result appended -> visible to a read_committed consumer": [],
        "batches from the one reading the closing event to the one emitting": [],
    }
    values = list(rows.values())
    for w in measured.windows:
        b = reading_batch(batches, trial, w.window_end)
        if b is None:
            continue
        tick = -(-w.closed_ms // trigger_ms) * trigger_ms
        values[0].append((tick - w.closed_ms) / 1000.0)
        values[1].append((b.start_ms - tick) / 1000.0)
        values[2].append((w.appended_ms - b.start_ms) / 1000.0)
        values[3].append((w.visible_ms - w.appended_ms) / 1000.0)
        emitting = [x for x in batches if x.start_ms <= w.appended_ms <= x.end_ms]
        if emitting:
            values[4].append(float(emitting[0].batch_id - b.batch_id))
    lines = [f"  {trial.name}: where a window's latency goes (median / p99 over windows, s):"]
    lines += [
        f"    {label:<72} {percentile(v, 50):6.2f} / {percentile(v, 99):6.2f}"
        for label, v in rows.items()
    ]
    return lines + batch_profile(trial, batches)


def epoch_profile(trial: Trial, measured: Measured) -> list[str]:
    """A-long has no micro-batches: a window's result waits for the end of the epoch of
    the task that gets the closing chunk, then for that epoch's commit."""
    visible = [w.visible for w in measured.windows]
    appended_to_visible = [(w.visible_ms - w.appended_ms) / 1000.0 for w in measured.windows]
    reports = [r for _, r in trial.reports][len(trial.reports) // 5 :]
    lines = [
        f"  {trial.name}: a window's latency (median / p99, s): closing event -> visible "
        f"{percentile(visible, 50):.2f} / {percentile(visible, 99):.2f}, of which last "
        f"result appended -> visible {percentile(appended_to_visible, 50):.2f} / "
        f"{percentile(appended_to_visible, 99):.2f}"
    ]
    if reports:
        lines.append(
            f"    epochs (a worker's, every trigger): {len(trial.reports)}; "
            + task_profile(reports).replace("A's batches", "A-long's epochs")
            .replace("foreachBatch", "epoch")
        )  # fmt: skip
    return lines


def batch_profile(trial: Trial, batches: list[Batch]) -> list[str]:
    """Median phase seconds of the trial's batches (Spark's durations, A's task reports)."""
    warm = batches[len(batches) // 5 :]
    if not warm:
        return []
    phases: dict[str, list[float]] = {}
    for b in warm:
        for k, v in b.durations.items():
            phases.setdefault(k, []).append(v)
    order = ["triggerExecution", "latestOffset", "walCommit", "queryPlanning", "getBatch",
             "addBatch", "commitOffsets"]  # fmt: skip
    text = ", ".join(f"{k} {statistics.median(phases[k]):.2f}" for k in order if k in phases)
    lines = [f"    Spark's batch phases, medians over {len(warm)} batches (s): {text}"]
    ids = {b.batch_id for b in warm}
    reports = [r for _, r in trial.reports if r.batch_id in ids]
    if reports:
        lines.append("    " + task_profile(reports))
    return lines


def task_profile(reports: list[Any]) -> str:
    """Medians over A's batches of foreachBatch time and the slowest task per phase."""

    def med(f: Callable[[Any], float]) -> float:
        return statistics.median(f(r) for r in reports)

    parts = {
        "foreachBatch": med(lambda r: r.seconds),
        "map side (slowest range)": med(lambda r: max((m.seconds for m in r.ranges), default=0)),
        "state task total": med(lambda r: max((t.seconds for t in r.tasks), default=0)),
        "open + restore": med(lambda r: max((t.seconds_restore for t in r.tasks), default=0)),
        "operator": med(lambda r: max((t.seconds_operator for t in r.tasks), default=0)),
        "outputs + changelog + commit": med(
            lambda r: max((t.seconds_commit for t in r.tasks), default=0)
        ),
    }
    text = ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
    return f"A's batches, medians (s; tasks: the slowest of the batch): {text}"


# ------------------------------------------------------------------------ printing, main


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


def trial_line(trial: Trial, measured: Measured, verdict: LagVerdict) -> str:
    app = [w.appended for w in measured.windows]
    vis = [w.visible for w in measured.windows]
    return (
        f"{trial.name}  {trial.produced.rate:>9,.0f}/s  "
        f"p50 {percentile(app, 50):5.2f}  p99 {percentile(app, 99):5.2f}  "
        f"max {max(app, default=float('nan')):5.2f}  | visible p50 {percentile(vis, 50):5.2f} "
        f"p99 {percentile(vis, 99):5.2f}  | {len(app)} windows"
        f"{f', {len(measured.missing)} MISSING' if measured.missing else ''}"
        f"{f', {len(measured.wrong)} WRONG' if measured.wrong else ''}  | {verdict.text()}  "
        f"| load {trial.load_avg[0]:.1f}-{trial.load_avg[1]:.1f}"
    )


@dataclass
class Outcome:
    """Every trial of a run, measured."""

    trials: list[tuple[Trial, Measured, LagVerdict]] = field(default_factory=list)
    brokers: list[Any] = field(default_factory=list)

    def of(self, name: str, rate: float | None = None) -> list[tuple[Trial, Measured, LagVerdict]]:
        return [
            t for t in self.trials if t[0].name == name and (rate is None or t[0].load.rate == rate)
        ]


def run_one(
    name: str, spark: Any, rate: float, seconds: float, tmp: Path, args: argparse.Namespace,
    outcome: Outcome,
) -> None:  # fmt: skip
    trial = run_trial(name, spark, rate, seconds, tmp, args, outcome.brokers)
    measured = measure(trial, args.warmup)
    verdict = lag_verdict(trial, args.warmup)
    outcome.trials.append((trial, measured, verdict))
    print(trial_line(trial, measured, verdict), flush=True)
    for problem in measured.wrong[:3]:
        print(f"   check: {problem}", flush=True)


def summary(outcome: Outcome, args: argparse.Namespace) -> list[str]:
    lines = []
    for rate in sorted({t.load.rate for t, _, _ in outcome.trials}):
        row = []
        p99 = {}
        for name in ("A", "A-long", "B"):
            trials = outcome.of(name, rate)
            if not trials:
                continue
            # until a read_committed consumer sees the result: A's transaction commit counts
            app = [w.visible for _, m, _ in trials for w in m.windows]
            p99[name] = percentile(app, 99)
            ok = sum(v.sustained for _, _, v in trials)
            row.append(
                f"{name}: p50 {percentile(app, 50):.2f} s, p99 {p99[name]:.2f} s, "
                f"max {max(app, default=float('nan')):.2f} s, sustained {ok}/{len(trials)}"
            )
        ratios = [
            f"{a}/B p99 {p99[a] / p99['B']:.2f}" for a in ("A", "A-long") if {a, "B"} <= p99.keys()
        ]
        lines.append(f"{rate:>9,.0f}/s  " + " | ".join(row) + "  " + ", ".join(ratios))
    goal = 2 * args.trigger_ms / 1000.0
    lines.append("latency: closing event's arrival -> result visible to a read_committed reader")
    lines.append(f"goal: A's p99 <= {goal:.1f} s (2 triggers) and <= half of B's p99")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from window_operator.durations import parse_duration_ms

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=50_000)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--window", default="1s")
    ap.add_argument("--lateness", default="1s")
    ap.add_argument("--trigger", default="1s")
    ap.add_argument("--guarantee", default="exactly_once")
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="A,A-long,B")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-rates", default="25000,50000,100000,150000")
    ap.add_argument("--sweep-seconds", type=float, default=30)
    ap.add_argument("--profile", action="store_true", help="where the latency goes")
    ap.add_argument("--tmpdir", type=Path, default=None)
    ap.add_argument("--dump", type=Path, default=None, help="pickle the trials here")
    args = ap.parse_args(argv)
    args.window_ms = parse_duration_ms(args.window)
    args.lateness_ms = parse_duration_ms(args.lateness)
    args.trigger_ms = parse_duration_ms(args.trigger)
    return args


def main(argv: list[str] | None = None) -> int:
    from window_operator.runtime.producers import close_producers
    from window_operator.spark.session import build_session

    args = parse_args(argv)
    names = [n for n in ("A", "A-long", "B") if n in args.only.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-latency-", dir=args.tmpdir))
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    print(
        f"{args.keys:,} keys, {args.partitions} partitions, tumbling {args.window}, lateness "
        f"{args.lateness}, trigger {args.trigger}, A {args.guarantee}, local[2]", flush=True,
    )  # fmt: skip
    spark = build_session(
        app_name="bench-latency",
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": str(args.partitions),
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
        },
    )
    outcome = Outcome()
    try:
        plan = (
            [(r, args.sweep_seconds) for r in map(float, args.sweep_rates.split(","))]
            if args.sweep
            else [(args.rate, args.seconds)]
        )
        for rate, seconds in plan:
            for _ in range(args.repeat):
                for name in names:
                    run_one(name, spark, rate, seconds, tmp, args, outcome)
        if args.dump is not None:
            args.dump.write_bytes(pickle.dumps([t for t, _, _ in outcome.trials]))
        print("\n" + "\n".join(summary(outcome, args)))
        if args.profile or not args.sweep:
            for trial, measured, _ in outcome.trials:
                print("\n".join(where_time_goes(trial, measured, args.trigger_ms)))
        bad = [
            t
            for t, m, _ in outcome.trials
            if t.name.startswith("A") and (m.missing or m.wrong or not m.windows)
        ]
        return 1 if bad else 0
    finally:
        spark.stop()
        close_producers()
        for broker in outcome.brokers:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
