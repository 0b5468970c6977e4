"""End-to-end throughput: Kafka -> the window job on Spark -> Kafka, against Spark's own windows.

Run ``python benchmarks/bench_pipeline.py``. Options: ``--events N`` (default 1,000,000),
``--keys K`` (10,000), ``--partitions P`` (4), ``--max-offsets-per-trigger M`` (250,000),
``--shuffle-partitions 4,8`` (B runs with each; the best counts), ``--late-emit``
(``per_arrival`` by default, see A below), ``--repeat R`` (A and every B run R times,
alternately; the best counts, the spread is shown), ``--bootstrap host:port`` (default
``KAFKA_BOOTSTRAP_SERVERS``; else a local noida-db broker is started), ``--profile``
(where A's time goes, see below; ``--top T`` cProfile lines, 0 for none), ``--tmpdir``.
Exit status 1 when a check fails.

Workload
--------
``N`` click events from :func:`window_operator.sample_data.click_stream` (``K`` keys
``/page/<i>`` with a Zipf-like skew, 10,000 events per second of event time, 10 % of
them delayed by 1..10,000 ms), produced (not timed) as JSON ``{"page", "ts",
"latency_ms"}`` to a ``P``-partition topic (``retention.ms=-1``), keyed by page (same key,
same partition: ``crc32(key) % P``), plus one far-future sentinel event per partition
(event time + 1 day) so that every real window fires.

Both contenders read the same topic through the same source
(:func:`window_operator.spark.kafka_source.read_kafka_stream`), with ``Trigger.AvailableNow``
and the same ``maxOffsetsPerTrigger``, in one ``local[2]`` SparkSession created (and warmed
with a tiny run of each query) before any clock starts. Each run is timed from the
query's start to its termination; the rate is ``N / seconds``.

``A``  this project's job (:class:`window_operator.spark.driver.StreamingJob`): hopping
       60 s / 10 s, ``count`` + ``mean(latency_ms)``, allowed lateness 5 s, late
       re-emission per late arrival (``--late-emit``), retention 1 h. Kafka -> tasks
       (RocksDB, changelog writes, acknowledged) -> results in Kafka. Its output topic is
       read afterwards: the latest result per (key, window) must equal a reference
       computed from all events (count exact, mean within a relative 1e-9) -> ``check:
       ok``. (With ``--late-emit 10s`` the check fails: ``TaskRunner.run`` sends its
       results before ``agg.flush()``, and the late re-emissions that ``flush()`` makes
       for windows about to expire are never sent. A wrong run keeps its timing.)
``B``  Spark's windowed aggregation over the same records: ``from_json(value)``,
       ``withWatermark("event_time", "5 seconds")``, ``groupBy(window(event_time, "60
       seconds", "10 seconds"), page).agg(count, avg)``, output mode ``update``, the
       ``noop`` sink (forces the whole computation, writes nothing), default (HDFS-backed,
       in-memory) state store. Checked: its sources read all ``N + P`` records. B drops
       events behind its watermark (A keeps them for 1 h and re-emits), so B does less.

The raw consume rate of the topic (one confluent-kafka consumer, all partitions, to the
end) is measured once, as the ceiling of any reader. The goal is ``A >= 5 x B``.

``--profile`` adds: A's per-micro-batch times (Spark's progress durations next to the
task reports' ``seconds``); ``A0``, the floor of A's Spark shape (same source,
``foreachBatch`` + ``mapInArrow`` whose tasks only count rows); and ``A*``, A run again
with its tasks (the job's own ``run_tasks``) under timers inside the Spark Python
workers: exclusive wall time per step of ``TaskRunner.run`` (store open, changelog
restore, operator load, decode, add, timers, encoding, result produce + acks, flush,
changelog produce + acks, RocksDB commit, close), the time spent waiting for the input,
and the merged cProfile of the tasks; then ``A*reuse``, the same with one idempotent
producer per Python worker (a what-if: the job creates one per task run, and each new
one waits for librdkafka's producer-id timer, 0.5-1 s, before its first flush).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from window_operator.codecs import result_decoder_for
from window_operator.config import JobConfig, parse_config
from window_operator.kafka_admin import KafkaAdmin, wait_for_broker
from window_operator.sample_data import ClickStream, click_stream

SIZE_MS = 60_000
STEP_MS = 10_000
EVENTS_PER_SECOND = 10_000.0
OUT_OF_ORDER = 0.1
MAX_DELAY_MS = 10_000
SENTINEL_KEY = "__end__"
SENTINEL_AHEAD_MS = 86_400_000
GOAL_RATIO = 5.0
MEAN_RTOL = 1e-9
WARM_EVENTS = 2_000
QUERY_TIMEOUT_S = 1_800


class CheckFailed(AssertionError):
    """A run produced wrong or incomplete results."""


@dataclass
class Run:
    """One timed query run."""

    name: str
    seconds: float
    events: int
    batches: int = 0
    results: int = 0
    check: str = "ok"
    info: str = ""
    progress: list[dict[str, Any]] = field(default_factory=list)
    reports: list[tuple[int, list[dict[str, Any]]]] = field(default_factory=list)
    config: JobConfig | None = None

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


# ---------------------------------------------------------------------------- Kafka


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    # retention.ms=-1: the events carry historical event times
    KafkaAdmin(bootstrap).create_topic(name, partitions, {"retention.ms": "-1"})


def make_stream(n: int, keys: int) -> ClickStream:
    return click_stream(
        n,
        n_keys=keys,
        events_per_second=EVENTS_PER_SECOND,
        out_of_order=OUT_OF_ORDER,
        max_delay_ms=MAX_DELAY_MS,
    )


def produce_stream(bootstrap: str, topic: str, cs: ClickStream, partitions: int) -> None:
    """The events keyed by page (``crc32 % partitions``), then one sentinel per partition."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "enable.idempotence": True,
            "batch.num.messages": 10_000,
        }
    )

    def send(key: bytes, value: bytes, part: int) -> None:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=part)
                return
            except BufferError:
                p.poll(0.05)

    part_of: dict[str, int] = {}
    dumps = orjson.dumps
    for i, (k, t, v) in enumerate(
        zip(cs.keys, cs.ts.tolist(), cs.latency_ms.tolist(), strict=True)
    ):
        part = part_of.get(k)
        if part is None:
            part = part_of[k] = zlib.crc32(k.encode()) % partitions
        send(k.encode(), dumps({"page": k, "ts": t, "latency_ms": v}), part)
        if i % 10_000 == 0:
            p.poll(0)
    end_ts = int(cs.ts.max()) + SENTINEL_AHEAD_MS
    sentinel = dumps({"page": SENTINEL_KEY, "ts": end_ts, "latency_ms": 0.0})
    for part in range(partitions):
        send(SENTINEL_KEY.encode(), sentinel, part)
    if p.flush(300) != 0:
        raise RuntimeError("producing the input did not complete")


def _reader(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
        }
    )


def consume_all(bootstrap: str, topic: str, timeout_s: float = 300.0) -> Iterator[list[Any]]:
    """Every record of ``topic`` (all partitions) to the end, in chunks of messages."""
    c = _reader(bootstrap)
    try:
        count = KafkaAdmin(bootstrap).partition_count(topic)
        if count is None:
            raise CheckFailed(f"topic {topic} does not exist")
        parts = list(range(count))
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        eof = {p for p, end in ends.items() if end == 0}
        c.assign([TopicPartition(topic, p, 0) for p in parts if p not in eof])
        deadline = time.monotonic() + timeout_s
        while len(eof) < len(parts):
            if time.monotonic() > deadline:
                raise CheckFailed(f"did not reach the end of {topic} in {timeout_s:.0f}s")
            msgs = c.consume(10_000, timeout=0.5)
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise RuntimeError(f"reading {topic}: {err}")
            if good:
                yield good
    finally:
        c.close()


def raw_consume_rate(bootstrap: str, topic: str) -> tuple[int, float]:
    """Records and seconds for one consumer reading the whole topic (values touched)."""
    n = 0
    t0 = time.perf_counter()
    for msgs in consume_all(bootstrap, topic):
        for m in msgs:
            m.value()
        n += len(msgs)
    return n, time.perf_counter() - t0


# ---------------------------------------------------------------------------- reference


def reference(cs: ClickStream) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], float]]:
    """Count and mean per (key, window start) over every event (NumPy)."""
    names: dict[str, int] = {}
    kid = np.fromiter(
        (names.setdefault(k, len(names)) for k in cs.keys), dtype=np.int64, count=len(cs)
    )
    key_of = list(names)
    frame = cs.ts - np.mod(cs.ts, STEP_MS)
    f0 = int(frame.min()) - SIZE_MS
    span = (int(frame.max()) - f0) // STEP_MS + 1
    code = kid * span + (frame - f0) // STEP_MS
    fcode, inv = np.unique(code, return_inverse=True)
    fcount = np.bincount(inv).astype(np.float64)
    fsum = np.bincount(inv, weights=cs.latency_ms)
    k = SIZE_MS // STEP_MS
    wcode = np.concatenate([fcode - j for j in range(k)])
    ucode, winv = np.unique(wcode, return_inverse=True)
    wcount = np.bincount(winv, weights=np.tile(fcount, k))
    wsum = np.bincount(winv, weights=np.tile(fsum, k))
    wkeys = [
        (key_of[i], s)
        for i, s in zip(
            (ucode // span).tolist(), ((ucode % span) * STEP_MS + f0).tolist(), strict=True
        )
    ]
    counts = dict(zip(wkeys, (int(c) for c in wcount.tolist()), strict=True))
    means = dict(zip(wkeys, (wsum / wcount).tolist(), strict=True))
    return counts, means


def check_output(
    bootstrap: str,
    config: JobConfig,
    ref: tuple[dict[tuple[str, int], int], dict[tuple[str, int], float]],
) -> tuple[int, Counter[str]]:
    """Latest result per (key, window) of the output topic == reference; (records, kinds)."""
    decoder = result_decoder_for(config)
    latest: dict[tuple[str, int], tuple[int, int, float]] = {}
    kinds: Counter[str] = Counter()
    n = 0
    for msgs in consume_all(bootstrap, config.output.topic):
        for m in msgs:
            value = m.value()
            if value is None:
                continue
            n += 1
            r = decoder.decode(value)
            kinds[r["kind"]] += 1
            kw = (r["key"], r["window_start"])
            prev = latest.get(kw)
            if prev is None or r["update_seq"] >= prev[0]:
                vals = r["values"]
                latest[kw] = (r["update_seq"], vals["clicks"], vals["mean_latency_ms"])
    counts, means = ref
    got = {kw: v for kw, v in latest.items() if kw[0] != SENTINEL_KEY}
    if got.keys() != counts.keys():
        raise CheckFailed(
            f"windows differ: {len(got.keys() - counts.keys())} unexpected, "
            f"{len(counts.keys() - got.keys())} missing"
        )
    wrong = [kw for kw, c in counts.items() if got[kw][1] != c]
    if wrong:
        kw = wrong[0]
        raise CheckFailed(f"{len(wrong)} wrong counts, e.g. {kw}: {got[kw][1]} != {counts[kw]}")
    keys = list(means)
    have = np.array([np.nan if got[kw][2] is None else got[kw][2] for kw in keys])
    want = np.array([means[kw] for kw in keys])
    bad = ~np.isclose(have, want, rtol=MEAN_RTOL, atol=0.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CheckFailed(f"{int(bad.sum())} wrong means, e.g. {keys[i]}: {have[i]} != {want[i]}")
    return n, kinds


# ---------------------------------------------------------------------------- queries


def job_config(topic: str, job: str, tmp: Path, args: argparse.Namespace) -> JobConfig:
    doc: dict[str, Any] = {
        "job": job,
        "input": {"topic": topic, "key": "page", "timestamp": "ts"},
        "window": {"type": "hopping", "size": "60s", "step": "10s"},
        "aggregations": [
            {"name": "clicks", "op": "count"},
            {"name": "mean_latency_ms", "op": "mean", "field": "latency_ms"},
        ],
        "watermark": {"allowed_lateness": "5s"},
        "emit": {"late": args.late_emit},
        "retention": {"time": "1h"},
        "state": {"dir": str(tmp / job / "state")},
        "spark": {
            "trigger": "available_now",
            "max_offsets_per_trigger": args.max_offsets_per_trigger,
        },
    }
    return parse_config(doc, base_dir=tmp)


def progress_of(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) for p in query.recentProgress]


def run_ours(
    spark: Any, bootstrap: str, topic: str, events: int, tmp: Path, args: argparse.Namespace
) -> Run:
    """A: the window job, timed from query start to termination (topics made before)."""
    from window_operator.spark.driver import StreamingJob, ensure_topics

    config = job_config(topic, f"bench-a-{uuid.uuid4().hex[:8]}", tmp, args)
    reports: list[tuple[int, list[dict[str, Any]]]] = []
    job = StreamingJob(
        config,
        bootstrap_servers=bootstrap,
        spark=spark,
        on_report=lambda batch_id, rows: reports.append((batch_id, rows)),
    )
    ensure_topics(config, bootstrap)
    t0 = time.perf_counter()
    job.start()
    done = job.await_termination(QUERY_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    if not done:
        job.stop()
        raise CheckFailed(f"A did not finish within {QUERY_TIMEOUT_S}s")
    if job.query.exception() is not None:
        raise CheckFailed(f"A failed: {job.query.exception()}")
    totals = job.run_totals.totals
    run = Run(
        "A",
        seconds,
        events,
        batches=job.run_totals.batches,
        results=totals.get("results", 0),
        progress=progress_of(job.query),
        reports=reports,
        config=config,
    )
    run.info = (
        f"applied {totals.get('applied', 0):,}, rejected {totals.get('rejected', 0)}, "
        f"changelog records {totals.get('changelog_records', 0):,}"
    )
    return run


def spark_windows(spark: Any, bootstrap: str, topic: str, max_offsets: int) -> Any:
    """B's streaming DataFrame: Spark's own hopping-window count + avg with a watermark."""
    from pyspark.sql import functions as F

    from window_operator.spark.kafka_source import read_kafka_stream

    df = read_kafka_stream(
        spark,
        bootstrap_servers=bootstrap,
        topics=[topic],
        starting_offsets="earliest",
        max_offsets_per_trigger=max_offsets,
    )
    schema = "page string, ts long, latency_ms double"
    events = df.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select(
        F.col("e.page").alias("page"),
        F.timestamp_millis(F.col("e.ts")).alias("event_time"),
        F.col("e.latency_ms").alias("latency_ms"),
    )
    return (
        events.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "60 seconds", "10 seconds"), "page")
        .agg(F.count("*").alias("clicks"), F.avg("latency_ms").alias("mean_latency_ms"))
    )


def run_spark(
    spark: Any,
    bootstrap: str,
    topic: str,
    events: int,
    records: int,
    shuffle: int,
    tmp: Path,
    args: argparse.Namespace,
) -> Run:
    """B: Spark's windowed aggregation to the noop sink, timed like A."""
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle))
    df = spark_windows(spark, bootstrap, topic, args.max_offsets_per_trigger)
    checkpoint = tmp / f"bench-b-{uuid.uuid4().hex[:8]}"
    writer = (
        df.writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    t0 = time.perf_counter()
    query = writer.start()
    done = query.awaitTermination(QUERY_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    if not done:
        query.stop()
        raise CheckFailed(f"B did not finish within {QUERY_TIMEOUT_S}s")
    if query.exception() is not None:
        raise CheckFailed(f"B failed: {query.exception()}")
    progress = progress_of(query)
    read = sum(int(p.get("numInputRows", 0)) for p in progress)
    if read != records:
        raise CheckFailed(f"B read {read:,} records, expected {records:,}")
    updated = dropped = 0
    for p in progress:
        for op in p.get("stateOperators", []):
            updated += int(op.get("numRowsUpdated", 0))
            dropped += int(op.get("numRowsDroppedByWatermark", 0))
    out = sum(int(p.get("sink", {}).get("numOutputRows", 0)) for p in progress)
    run = Run(
        f"B{shuffle}",
        seconds,
        events,
        batches=len(progress),
        results=out if out >= 0 else updated,
        progress=progress,
    )
    run.info = (
        f"shuffle.partitions {shuffle}; state rows updated {updated:,}, "
        f"input rows dropped by watermark {dropped:,}"
    )
    return run


def run_floor(spark: Any, bootstrap: str, topic: str, events: int, max_offsets: int) -> Run:
    """A's Spark shape without the tasks: source -> foreachBatch(mapInArrow count)."""
    from window_operator.spark.kafka_source import read_kafka_stream

    df = read_kafka_stream(
        spark,
        bootstrap_servers=bootstrap,
        topics=[topic],
        starting_offsets="earliest",
        max_offsets_per_trigger=max_offsets,
    )
    counted = [0, 0]

    def count_rows(it: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        n = sum(b.num_rows for b in it)
        yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])

    def process(batch_df: Any, _batch_id: int) -> None:
        rows = (
            batch_df.select("key", "value", "topic", "partition", "offset")
            .mapInArrow(count_rows, "n long")
            .collect()
        )
        counted[0] += sum(r["n"] for r in rows)
        counted[1] += 1

    checkpoint = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    try:
        t0 = time.perf_counter()
        query = (
            df.writeStream.foreachBatch(process)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(QUERY_TIMEOUT_S)
        seconds = time.perf_counter() - t0
        progress = progress_of(query)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    run = Run("A0", seconds, events, batches=counted[1], results=counted[0], progress=progress)
    run.info = "same source and foreachBatch + mapInArrow shape as A, tasks only count rows"
    return run


def warm_up(spark: Any, bootstrap: str, tmp: Path, args: argparse.Namespace) -> None:
    """Start the JVM's code paths and the Python workers with tiny runs of each query."""
    topic = f"bench-warm-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, args.partitions)
    produce_stream(bootstrap, topic, make_stream(WARM_EVENTS, 100), args.partitions)
    records = WARM_EVENTS + args.partitions
    small = argparse.Namespace(**{**vars(args), "max_offsets_per_trigger": WARM_EVENTS // 2})
    run_ours(spark, bootstrap, topic, WARM_EVENTS, tmp, small)
    for shuffle in args.shuffle_partitions:
        run_spark(spark, bootstrap, topic, WARM_EVENTS, records, shuffle, tmp, small)
    if args.profile:
        run_floor(spark, bootstrap, topic, WARM_EVENTS, WARM_EVENTS // 2)


# ---------------------------------------------------------------------------- profile


def batch_table(run: Run) -> list[str]:
    """A's micro-batches: Spark's durations next to what the tasks reported."""
    by_batch = dict(run.reports)
    lines = [
        f"  {'batch':>5} {'input':>8} {'trigger s':>9} {'addBatch s':>10} {'other s':>7} "
        f"{'tasks':>5} {'task s sum':>10} {'task s max':>10} {'restored':>8} "
        f"{'changelog':>9} {'results':>8}"
    ]
    tot = Counter[str]()
    for p in run.progress:
        d = p.get("durationMs", {})
        trig = d.get("triggerExecution", 0) / 1000
        add = d.get("addBatch", 0) / 1000
        rows = by_batch.get(int(p["batchId"]), [])
        secs = [float(r["seconds"]) for r in rows]
        vals = {
            k: sum(int(r[k]) for r in rows)
            for k in ("restored_records", "changelog_records", "results")
        }
        tot.update({"input": int(p.get("numInputRows", 0)), **vals})
        tot.update({"trigger_ms": int(d.get("triggerExecution", 0))})
        tot.update({"add_ms": int(d.get("addBatch", 0))})
        tot.update({"task_ms": int(sum(secs) * 1000)})
        lines.append(
            f"  {p['batchId']:>5} {int(p.get('numInputRows', 0)):>8,} {trig:>9.2f} {add:>10.2f} "
            f"{trig - add:>7.2f} {len(rows):>5} {sum(secs):>10.2f} {max(secs, default=0):>10.2f} "
            f"{vals['restored_records']:>8,} {vals['changelog_records']:>9,} "
            f"{vals['results']:>8,}"
        )
    lines.append(
        f"  {'all':>5} {tot['input']:>8,} {tot['trigger_ms'] / 1000:>9.2f} "
        f"{tot['add_ms'] / 1000:>10.2f} {(tot['trigger_ms'] - tot['add_ms']) / 1000:>7.2f} "
        f"{'':>5} {tot['task_ms'] / 1000:>10.2f} {'':>10} {tot['restored_records']:>8,} "
        f"{tot['changelog_records']:>9,} {tot['results']:>8,}"
    )
    lines.append(
        f"  wall {run.seconds:.2f}s = triggers {tot['trigger_ms'] / 1000:.2f}s + "
        f"{run.seconds - tot['trigger_ms'] / 1000:.2f}s outside triggers (query start, "
        "AvailableNow preparation, termination); addBatch = source read + Arrow hand-over + "
        "tasks (2 task slots)"
    )
    return lines


class PhaseTimer:
    """Exclusive wall time per step of ``TaskRunner.run``, by wrapping what it calls.

    A step called inside another (result encoding inside the output send) counts for
    itself only; its parent gets the rest.
    """

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._stack: list[list[float]] = []

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def wrap(self, owner: Any, attr: str, phase: str) -> None:
        original = getattr(owner, attr)
        timer = self

        @functools.wraps(original)
        def timed(*a: Any, **kw: Any) -> Any:
            frame = [time.perf_counter(), 0.0]  # start, time spent in nested steps
            timer._stack.append(frame)
            try:
                return original(*a, **kw)
            finally:
                timer._stack.pop()
                elapsed = time.perf_counter() - frame[0]
                timer.seconds[phase] += elapsed - frame[1]
                timer.calls[phase] += 1
                if timer._stack:
                    timer._stack[-1][1] += elapsed

        setattr(owner, attr, timed)


PHASES = (
    ("store open", "RocksDB open (TaskStore())"),
    ("restore", "changelog catch-up: consumer, watermark query, replay"),
    ("operator load", "operator state from RocksDB (runtime.operator)"),
    ("decode", "JSON payloads -> EventBatch (columnar or per record)"),
    ("add_batch", "windowing + aggregation (add_batch)"),
    ("timeout", "timers (agg.timeout)"),
    ("producer", "Producer() construction"),
    ("encode", "result encoding (encode_batch)"),
    ("outputs", "produce results + flush (acks)"),
    ("flush", "state serialisation (agg.flush(commit=False))"),
    ("changelog", "changelog produce + flush (acks)"),
    ("commit", "RocksDB WriteBatch (store.commit)"),
    ("close", "RocksDB close (flush, handles, gc.collect)"),
)
PROFILE_SCHEMA = "phase string, seconds double, calls long, stats binary"


def _worker_timer() -> PhaseTimer:
    """The phase timer of this Python worker, its wrappers installed once per process."""
    import confluent_kafka

    import stores.rocks as rocks
    import window_operator.codecs as codecs
    import window_operator.task as task_mod
    from stores.changelog import ChangelogWriter
    from window_operator.job import JobRuntime
    from window_operator.task import TaskRunner
    from window_operator.timewindows import WindowedAggregator

    timer: PhaseTimer | None = getattr(task_mod, "_bench_phase_timer", None)
    if timer is not None:
        return timer
    timer = PhaseTimer()
    timer.wrap(rocks.TaskStore, "__init__", "store open")
    timer.wrap(task_mod, "restore_from_changelog", "restore")
    timer.wrap(JobRuntime, "operator", "operator load")
    timer.wrap(task_mod, "decode_guarded", "decode")  # columnar or per record
    timer.wrap(WindowedAggregator, "add_batch", "add_batch")
    timer.wrap(WindowedAggregator, "timeout", "timeout")
    timer.wrap(confluent_kafka, "Producer", "producer")
    timer.wrap(codecs.JsonResultEncoder, "encode_batch", "encode")
    timer.wrap(TaskRunner, "_send_outputs", "outputs")
    timer.wrap(WindowedAggregator, "flush", "flush")
    timer.wrap(ChangelogWriter, "log", "changelog")
    timer.wrap(rocks.TaskStore, "commit", "commit")
    timer.wrap(rocks.TaskStore, "close", "close")
    task_mod._bench_phase_timer = timer  # type: ignore[attr-defined]
    return timer


def _install_producer_cache() -> None:
    """What-if: ``confluent_kafka.Producer(conf)`` returns one producer per config and
    process while ``confluent_kafka._bench_reuse_producer`` is true (the job itself
    creates a new idempotent producer per task run)."""
    import confluent_kafka

    if getattr(confluent_kafka, "_bench_producers", None) is not None:
        return
    original = confluent_kafka.Producer
    cache: dict[str, Any] = {}

    def producer(conf: dict[str, Any], *a: Any, **kw: Any) -> Any:
        if not getattr(confluent_kafka, "_bench_reuse_producer", False) or a or kw:
            return original(conf, *a, **kw)
        key = json.dumps(conf, sort_keys=True, default=str)
        if key not in cache:
            cache[key] = original(conf)
        return cache[key]

    confluent_kafka.Producer = producer
    confluent_kafka._bench_producers = cache  # type: ignore[attr-defined]


def profiled_tasks(
    settings: Any, batches: Iterator[Any], with_cprofile: bool, reuse_producer: bool
) -> Iterator[Any]:
    """``mapInArrow`` body: the job's own ``run_tasks`` under the phase timers."""
    import marshal

    import confluent_kafka
    import pyarrow as pa

    from window_operator.spark.driver import run_tasks

    _install_producer_cache()
    confluent_kafka._bench_reuse_producer = reuse_producer  # type: ignore[attr-defined]
    timer = _worker_timer()
    timer.reset()
    t0 = time.perf_counter()
    tables = list(batches)  # the input, as run_tasks would take it (read + hand-over)
    t_input = time.perf_counter() - t0
    prof = cProfile.Profile() if with_cprofile else None

    def body() -> list[Any]:
        return list(run_tasks(settings, iter(tables)))

    out = prof.runcall(body) if prof is not None else body()
    wall = time.perf_counter() - t0 - t_input
    reports = [r for b in out for r in b.to_pylist()]
    rows = [(k, timer.seconds[k], timer.calls[k]) for k in timer.seconds]
    rows.append(("_input", t_input, len(tables)))
    rows.append(("_run_tasks", wall, 1))
    rows.append(("_task_seconds", sum(r["seconds"] for r in reports), len(reports)))
    stats: list[bytes | None] = [None] * len(rows)
    if prof is not None:
        prof.create_stats()
        stats[0] = marshal.dumps(prof.stats)  # type: ignore[attr-defined]
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.string()),
            pa.array([float(r[1]) for r in rows], pa.float64()),
            pa.array([int(r[2]) for r in rows], pa.int64()),
            pa.array(stats, pa.binary()),
        ],
        names=["phase", "seconds", "calls", "stats"],
    )


@dataclass
class Profiled:
    """A run of A under the phase timers: totals per phase over all task runs."""

    run: Run
    seconds: Counter[str]
    calls: Counter[str]
    stats: list[bytes]


def run_profiled(
    spark: Any,
    bootstrap: str,
    topic: str,
    events: int,
    tmp: Path,
    args: argparse.Namespace,
    ref: Any,
    *,
    reuse_producer: bool = False,
) -> Profiled:
    """A again, its tasks under the phase timers (and cProfile) inside the Spark workers.

    Same source, same ``foreachBatch`` + ``mapInArrow`` + ``run_tasks`` as
    ``StreamingJob``; the output is checked like A's. ``reuse_producer``: the what-if
    of one idempotent producer per worker process instead of one per task run.
    """
    from window_operator.spark.driver import ensure_topics
    from window_operator.spark.kafka_source import read_kafka_stream
    from window_operator.task import TaskSettings

    config = job_config(topic, f"bench-prof-{uuid.uuid4().hex[:8]}", tmp, args)
    ensure_topics(config, bootstrap)
    settings = TaskSettings(
        config=config, bootstrap_servers=bootstrap, state_dir=str(config.state.dir)
    )
    seconds: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    stats: list[bytes] = []
    batches = [0]
    with_cprofile = args.top > 0 and not reuse_producer

    def process(batch_df: Any, _batch_id: int) -> None:
        rows = (
            batch_df.select("key", "value", "topic", "partition", "offset")
            .mapInArrow(
                lambda it: profiled_tasks(settings, it, with_cprofile, reuse_producer),
                PROFILE_SCHEMA,
            )
            .collect()
        )
        batches[0] += 1
        for r in rows:
            seconds[r["phase"]] += r["seconds"]
            calls[r["phase"]] += r["calls"]
            if r["stats"] is not None:
                stats.append(bytes(r["stats"]))

    df = read_kafka_stream(
        spark,
        bootstrap_servers=bootstrap,
        topics=[topic],
        starting_offsets="earliest",
        max_offsets_per_trigger=args.max_offsets_per_trigger,
    )
    t0 = time.perf_counter()
    query = (
        df.writeStream.foreachBatch(process)
        .option("checkpointLocation", str(config.spark.checkpoint_dir))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(QUERY_TIMEOUT_S)
    name = "A*reuse" if reuse_producer else "A*"
    run = Run(name, time.perf_counter() - t0, events, batches=batches[0], config=config)
    if query.exception() is not None:
        raise CheckFailed(f"the profiled run failed: {query.exception()}")
    run.progress = progress_of(query)
    try:
        n_out, _ = check_output(bootstrap, config, ref)
        run.results = n_out
    except CheckFailed as exc:
        run.check = f"FAILED: {exc}"
    return Profiled(run, seconds, calls, stats)


def profile_lines(runs: list[Profiled], top: int) -> list[str]:
    """The phase table of the profiled runs (side by side), then the first one's cProfile."""
    lines = []
    for pr in runs:
        task_s = pr.seconds["_task_seconds"]
        lines.append(
            f"  {pr.run.name:8} check {pr.run.check}: {pr.run.seconds:.2f}s wall, "
            f"{pr.run.rate:,.0f} ev/s; {int(pr.calls['_task_seconds'])} task runs, "
            f"{task_s:.2f}s task time (TaskRunner.run, summed); waiting for the input "
            f"(source read + Arrow hand-over) {pr.seconds['_input']:.2f}s summed"
        )
    head = "".join(f" {pr.run.name + ' s':>10} {'s/call':>7}" for pr in runs)
    lines.append(f"  {'step':14}{head} {'calls':>6}  what")
    accounted = [0.0] * len(runs)
    for phase, what in PHASES:
        cells = ""
        for i, pr in enumerate(runs):
            s, c = pr.seconds[phase], pr.calls[phase]
            accounted[i] += s
            per = f"{s / c:>7.3f}" if c else f"{'-':>7}"
            cells += f" {s:>10.2f} {per}"
        lines.append(f"  {phase:14}{cells} {int(runs[0].calls[phase]):>6}  {what}")
    cells = "".join(
        f" {pr.seconds['_task_seconds'] - a:>10.2f} {'':>7}"
        for pr, a in zip(runs, accounted, strict=True)
    )
    lines.append(f"  {'other':14}{cells} {'':>6}  rest of run()")
    cells = "".join(f" {pr.seconds['_task_seconds']:>10.2f} {'':>7}" for pr in runs)
    lines.append(f"  {'total':14}{cells}")
    stats = runs[0].stats
    if stats and top > 0:
        with tempfile.TemporaryDirectory(prefix="bench-pstats-") as d:
            paths = []
            for i, raw in enumerate(stats):
                path = Path(d) / f"{i}.pstats"
                path.write_bytes(raw)
                paths.append(str(path))
            buf = io.StringIO()
            pstats.Stats(*paths, stream=buf).sort_stats("tottime").print_stats(top)
        body = buf.getvalue().strip().splitlines()
        start = next((i for i, ln in enumerate(body) if ln.strip().startswith("ncalls")), 0)
        lines.append("")
        lines.append(f"  cProfile of {runs[0].run.name}'s tasks in the Spark workers, top {top}:")
        lines.extend("  " + ln for ln in body[start:])
    return lines


# ---------------------------------------------------------------------------- report


def machine() -> str:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    java = "?"
    try:
        proc = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
        java = (proc.stderr or proc.stdout).splitlines()[0]
    except (OSError, IndexError):
        pass
    return (
        f"machine: {cpu}, nproc={cpus}, Python {platform.python_version()}, "
        f"pyspark {version('pyspark')}, {java}, confluent-kafka {version('confluent-kafka')}"
    )


def load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return "load average " + " ".join(f.read().split()[:3])
    except OSError:
        return "load average ?"


def workload(args: argparse.Namespace, bootstrap: str, local: bool) -> str:
    span_s = args.events / EVENTS_PER_SECOND
    return "\n".join(
        [
            f"workload: click_stream N={args.events:,} events, K={args.keys:,} keys (Zipf-like), "
            f"{EVENTS_PER_SECOND:,.0f} ev/s of event time ({span_s:,.0f} s), "
            f"{OUT_OF_ORDER:.0%} delayed 1..{MAX_DELAY_MS:,} ms;",
            f"  JSON values, keyed by page, {args.partitions} partitions, + 1 sentinel per "
            f"partition; broker {'local noida-db' if local else 'external'} {bootstrap};",
            "  hopping 60s/10s count + mean(latency_ms), watermark/allowed lateness 5s; "
            f"AvailableNow, maxOffsetsPerTrigger {args.max_offsets_per_trigger:,}, local[2];",
            f"  A: window job, late emit {args.late_emit}, retention 1h, RocksDB + changelog, "
            "results to Kafka (acked);",
            "  B: Spark groupBy(window, page).agg(count, avg), update mode, noop sink, "
            "HDFS-backed state store",
        ]
    )


def spread(runs: list[Run]) -> str:
    rates = [r.rate for r in runs]
    if len(rates) < 2:
        return "1 run"
    return (
        f"{len(rates)} runs: {min(rates):,.0f}..{max(rates):,.0f} ev/s "
        f"(median {statistics.median(rates):,.0f})"
    )


def print_table(groups: dict[str, list[Run]], titles: dict[str, str]) -> None:
    """Best run per query (fastest correct one, else the fastest timed one)."""
    header = (
        f"{'':4} {'query':50} {'wall s':>7} {'events/s':>10} {'batches':>7} {'results':>9}  check"
    )
    print(header)
    print("-" * len(header))
    for name, runs in groups.items():
        ok = [r for r in runs if r.check == "ok"] or [r for r in runs if r.seconds > 0] or runs
        best = min(ok, key=lambda r: r.seconds)
        print(
            f"{name:4} {titles[name]:50} {best.seconds:>7.2f} {best.rate:>10,.0f} "
            f"{best.batches:>7} {best.results:>9,}  check: {best.check}"
        )
        print(f"{'':7}best of {spread(runs)}; {best.info}")


# ---------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--max-offsets-per-trigger", type=int, default=250_000)
    p.add_argument(
        "--shuffle-partitions",
        default="4,8",
        help="spark.sql.shuffle.partitions values to run B with (comma-separated)",
    )
    p.add_argument(
        "--late-emit", default="per_arrival", help="A's emit.late: per_arrival or a duration"
    )
    p.add_argument("--repeat", type=int, default=1, help="timed runs of A and of each B")
    p.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="an existing broker (default: KAFKA_BOOTSTRAP_SERVERS, else a local noida-db)",
    )
    p.add_argument("--profile", action="store_true", help="break A's time down")
    p.add_argument(
        "--top", type=int, default=20, help="cProfile entries with --profile (0: no cProfile)"
    )
    p.add_argument("--tmpdir", default=None, help="where state and checkpoints go")
    args = p.parse_args(argv)
    try:
        args.shuffle_partitions = [int(s) for s in args.shuffle_partitions.split(",") if s.strip()]
    except ValueError:
        p.error("--shuffle-partitions takes comma-separated integers")
    if not args.shuffle_partitions or min(args.shuffle_partitions) < 1:
        p.error("--shuffle-partitions needs positive integers")
    if min(args.events, args.keys, args.partitions, args.max_offsets_per_trigger, args.repeat) < 1:
        p.error("--events, --keys, --partitions, --max-offsets-per-trigger, --repeat must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from window_operator.broker import LocalBroker
    from window_operator.spark.session import build_session

    log = functools.partial(print, file=sys.stderr, flush=True)
    broker: LocalBroker | None = None
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-", dir=args.tmpdir))
    spark = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
            wait_for_broker(bootstrap)
        else:
            broker = LocalBroker().start()
            bootstrap = broker.bootstrap_servers
        print(machine())
        print(workload(args, bootstrap, broker is not None))
        print(f"{load()} at the start")

        topic = f"bench-clicks-{uuid.uuid4().hex[:8]}"
        log(f"producing {args.events:,} events to {topic} ...")
        cs = make_stream(args.events, args.keys)
        create_topic(bootstrap, topic, args.partitions)
        t0 = time.perf_counter()
        produce_stream(bootstrap, topic, cs, args.partitions)
        produce_s = time.perf_counter() - t0
        records = args.events + args.partitions
        ref = reference(cs)
        del cs
        n_raw, raw_s = raw_consume_rate(bootstrap, topic)
        if n_raw != records:
            raise CheckFailed(f"the topic holds {n_raw:,} records, expected {records:,}")

        log("starting Spark (local[2]) and warming up ...")
        spark = build_session(app_name="bench-pipeline", master="local[2]")
        warm_up(spark, bootstrap, tmp, args)

        groups: dict[str, list[Run]] = {"A": []}
        titles = {"A": "window job (Kafka -> tasks + RocksDB/changelog -> Kafka)"}
        for s in args.shuffle_partitions:
            groups[f"B{s}"] = []
            titles[f"B{s}"] = f"Spark window agg, update, noop (shuffle.partitions {s})"
        failed = False
        for i in range(args.repeat):
            log(f"round {i + 1}/{args.repeat}: A ...")
            try:
                a = run_ours(spark, bootstrap, topic, args.events, tmp, args)
            except CheckFailed as exc:
                a = Run("A", 0.0, args.events, check=f"FAILED: {exc}")
            else:
                # A wrong result keeps its timing (shown, marked FAILED, exit status 1).
                assert a.config is not None
                try:
                    n_out, kinds = check_output(bootstrap, a.config, ref)
                    by_kind = ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))
                    a.info += f"; output records {n_out:,} ({by_kind})"
                except CheckFailed as exc:
                    a.check = f"FAILED: {exc}"
            failed = failed or a.check != "ok"
            groups["A"].append(a)
            log(f"  A: {a.seconds:.2f}s {a.rate:,.0f} ev/s check {a.check}; {load()}")
            for s in args.shuffle_partitions:
                log(f"round {i + 1}/{args.repeat}: B (shuffle.partitions {s}) ...")
                try:
                    b = run_spark(spark, bootstrap, topic, args.events, records, s, tmp, args)
                except CheckFailed as exc:
                    b = Run(f"B{s}", 0.0, args.events, check=f"FAILED: {exc}")
                    failed = True
                groups[f"B{s}"].append(b)
                log(f"  B{s}: {b.seconds:.2f}s {b.rate:,.0f} ev/s; {load()}")

        floor: Run | None = None
        if args.profile:
            log("profile: floor run (source + mapInArrow count) ...")
            floor = run_floor(spark, bootstrap, topic, args.events, args.max_offsets_per_trigger)
            groups["A0"] = [floor]
            titles["A0"] = "floor of A's shape: source + mapInArrow, no tasks"

        print(f"{load()} at the end")
        print(
            f"input: {records:,} records produced in {produce_s:.1f}s (not timed); raw consume "
            f"(1 confluent-kafka consumer): {n_raw / raw_s:,.0f} records/s ({raw_s:.2f}s) = "
            "the ceiling"
        )
        print()
        print_table(groups, titles)
        timed_a = [r for r in groups["A"] if r.seconds > 0]
        ok_a = [r for r in timed_a if r.check == "ok"]
        ok_b = [r for k, rs in groups.items() if k.startswith("B") for r in rs if r.check == "ok"]
        print()
        if timed_a and ok_b:
            best_a = max(r.rate for r in ok_a or timed_a)
            best_b = max(ok_b, key=lambda r: r.rate)
            ratio = best_a / best_b.rate
            verdict = "met" if ratio >= GOAL_RATIO and ok_a else "NOT met"
            print(
                f"A / B = {best_a:,.0f} / {best_b.rate:,.0f} ({best_b.name}) = {ratio:.2f}x; "
                f"goal A >= {GOAL_RATIO:.0f}x B: {verdict}"
            )
            print(
                f"A reaches {best_a / (n_raw / raw_s):.1%} of the raw consume rate, "
                f"B {best_b.rate / (n_raw / raw_s):.1%}"
            )
            if not ok_a:
                print("  (A's results were WRONG: its rate is shown but its check failed)")

        if args.profile and timed_a:
            last = timed_a[-1]
            print()
            print(f"A's micro-batches (its run at {last.rate:,.0f} ev/s):")
            print("\n".join(batch_table(last)))
            if floor is not None:
                fl = [p.get("durationMs", {}) for p in floor.progress]
                trig = sum(d.get("triggerExecution", 0) for d in fl) / 1000
                print(
                    f"  floor A0: {floor.seconds:.2f}s ({floor.rate:,.0f} ev/s), "
                    f"{floor.batches} batches, {trig:.2f}s in triggers"
                )
            print()
            log("profile: A under the phase timers ...")
            profiled = [run_profiled(spark, bootstrap, topic, args.events, tmp, args, ref)]
            log("profile: the same with one producer per worker (what-if) ...")
            profiled.append(
                run_profiled(
                    spark, bootstrap, topic, args.events, tmp, args, ref, reuse_producer=True
                )
            )
            failed = failed or any(pr.run.check != "ok" for pr in profiled)
            print(
                "Where A's task time goes (timers inside the Spark workers, separate runs; "
                "A*reuse: what-if one idempotent producer per worker process):"
            )
            print("\n".join(profile_lines(profiled, args.top)))
        print()
        if failed:
            bad = [f"{r.name}: {r.check}" for rs in groups.values() for r in rs if r.check != "ok"]
            print(f"check: FAILED ({'; '.join(bad)})")
            return 1
        print("check: ok")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
