"""End-to-end throughput: Kafka -> the window job on Spark (through its keyed exchange) ->
Kafka, next to Spark's own windowing over the same events, in one run.

Run ``python benchmarks/bench_pipeline.py``. Options: ``--events N`` (default 1,000,000),
``--keys K`` (10,000), ``--partitions P`` (4), ``--max-offsets-per-trigger M`` (250,000),
``--repeat R`` (every contender R times, alternately; the best counts, the spread is
shown), ``--only A,B,...`` (a subset of the contenders below), ``--tmpdir``. Exit status 1
when a check fails.

Workload: ``N`` click events (:func:`window_operator.sample_data.click_stream`: ``K`` keys
with a Zipf-like skew, 10,000 events per second of event time, 10 % delayed by up to
10 s), produced (not timed) as JSON to two ``P``-partition topics, each on a fresh local
broker of its own: *unkeyed* (round-robin, each event keyed by its number: a key's events
are in every partition, as real topics are) and *keyed* (keyed by page, ``crc32 % P``);
one far-future event per partition makes every window fire. The job: hopping 60 s / 10 s
``count`` + ``mean(latency_ms)``, allowed lateness 5 s, LATE per arrival, retention 1 h.

Contenders, each timed from the query's start to its end (``Trigger.AvailableNow``, the
same source and ``maxOffsetsPerTrigger``, one ``local[2]`` session warmed up first):

``A``     this job on the unkeyed topic, exactly-once (one Kafka transaction per state task
          and batch); its output is checked against a reference computed from the events;
``A-long`` the same job in its long-running shape (``spark.mode: long_running``: workers
          that stay up and exchange rows directly, epochs of ``maxOffsetsPerTrigger``);
``A-alo`` the same as A, at-least-once (no transactions): the cost of the transactions;
``A-keyed`` this job on the keyed topic (the exchange moves less data across tasks);
``B``     Spark's ``groupBy(window(60 s, 10 s), page).agg(count, avg)`` with a 5 s watermark,
          update mode, ``noop`` sink (B drops events behind its watermark and writes no
          output: it does less than A);
``F-read`` the floor of A's Spark shape: the same source and ``foreachBatch``, a Spark job
          whose map tasks read their ranges from Kafka and only count them;
``F-exchange`` the same, plus decoding, routing and the shuffle into the state tasks,
          which only count their rows (``F-exchange - F-read``: the exchange's cost).

Also measured once: the raw consume rate of the unkeyed topic (one plain consumer), the
ceiling of any reader on this machine, and where A's time goes (the task reports).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from window_operator.broker import LocalBroker
from window_operator.codecs import result_decoder_for
from window_operator.config import JobConfig, parse_config
from window_operator.kafka_admin import KafkaAdmin
from window_operator.sample_data import ClickStream, click_stream

SIZE_MS = 60_000
STEP_MS = 10_000
EVENTS_PER_SECOND = 10_000.0
OUT_OF_ORDER = 0.1
MAX_DELAY_MS = 10_000
SENTINEL_KEY = "__end__"
SENTINEL_AHEAD_MS = 86_400_000
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
    reports: list[Any] = field(default_factory=list)

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


def produce_stream(
    bootstrap: str, topic: str, cs: ClickStream, partitions: int, *, keyed: bool = True
) -> None:
    """The events keyed by page (``crc32 % partitions``), or round-robin keyed by their
    number (``keyed=False``), then one sentinel per partition."""
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
        if keyed:
            part = part_of.get(k)
            if part is None:
                part = part_of[k] = zlib.crc32(k.encode()) % partitions
            send(k.encode(), dumps({"page": k, "ts": t, "latency_ms": v}), part)
        else:
            send(b"%d" % i, dumps({"page": k, "ts": t, "latency_ms": v}), i % partitions)
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
    progress = [orjson.loads(p.json) for p in query.recentProgress]
    read = sum(int(p.get("numInputRows", 0)) for p in progress)
    if read != records:
        raise CheckFailed(f"B read {read:,} records, expected {records:,}")
    updated = dropped = 0
    for p in progress:
        for op in p.get("stateOperators", []):
            updated += int(op.get("numRowsUpdated", 0))
            dropped += int(op.get("numRowsDroppedByWatermark", 0))
    out = sum(int(p.get("sink", {}).get("numOutputRows", 0)) for p in progress)
    run = Run("B", seconds, events, batches=len(progress), results=out if out >= 0 else updated)
    run.info = (
        f"shuffle.partitions {shuffle}; state rows updated {updated:,}, "
        f"input rows dropped by watermark {dropped:,}"
    )
    return run


# ---------------------------------------------------------------------------- contenders


def job_config(
    topic: str, tmp: Path, args: argparse.Namespace, guarantee: str, mode: str = "micro_batch"
) -> JobConfig:
    job = f"bench-a-{uuid.uuid4().hex[:8]}"
    doc: dict[str, Any] = {
        "job": job,
        "input": {"topic": topic, "key": "page", "timestamp": "ts"},
        "window": {"type": "hopping", "size": "60s", "step": "10s"},
        "aggregations": [
            {"name": "clicks", "op": "count"},
            {"name": "mean_latency_ms", "op": "mean", "field": "latency_ms"},
        ],
        "watermark": {"allowed_lateness": "5s"},
        "emit": {"late": "per_arrival"},
        "retention": {"time": "1h"},
        "state": {"dir": str(tmp / job / "state")},
        "processing": {"guarantee": guarantee},
        "spark": {
            "mode": mode,
            "trigger": "available_now",
            "max_offsets_per_trigger": args.max_offsets_per_trigger,
        },
    }
    return parse_config(doc, base_dir=tmp)


def run_ours(
    name: str,
    spark: Any,
    topic: Topic,
    tmp: Path,
    args: argparse.Namespace,
    guarantee: str,
    mode: str = "micro_batch",
) -> Run:
    """A: the window job, timed from its start to its end, its output checked."""
    from window_operator.spark.driver import StreamingJob, prepare_topics
    from window_operator.spark.longrun import job_for

    config = job_config(topic.name, tmp, args, guarantee, mode)
    reports: list[Any] = []
    job = job_for(config, bootstrap_servers=topic.bootstrap, spark=spark, on_report=reports.append)
    prepare_topics(config, topic.bootstrap)
    t0 = time.perf_counter()
    job.start()
    done = job.await_termination(QUERY_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    if not done:
        job.stop()
        raise CheckFailed(f"{name} did not finish within {QUERY_TIMEOUT_S}s")
    if isinstance(job, StreamingJob) and job.query.exception() is not None:
        raise CheckFailed(f"{name} failed: {job.query.exception()}")
    totals = job.run_totals.totals
    run = Run(name, seconds, topic.events, batches=job.run_totals.batches, reports=reports)
    run.results = totals.get("results", 0)
    if topic.reference is not None:
        n, kinds = check_output(topic.bootstrap, config, topic.reference)
        run.info = f"{n:,} results ({dict(kinds)}), checked against the reference"
    return run


def run_floor(
    name: str, spark: Any, topic: Topic, tmp: Path, args: argparse.Namespace, exchange: bool
) -> Run:
    """The floor of A's shape: the same Spark job, with tasks that only count rows."""
    from window_operator.runtime.batch import BatchContext, map_range
    from window_operator.runtime.exchange import Rows, from_ipc
    from window_operator.runtime.settings import TaskSettings
    from window_operator.spark.exchange import read_input
    from window_operator.spark.kafka_source import read_kafka_stream

    config = job_config(topic.name, tmp, args, "at_least_once")
    settings = TaskSettings(config, topic.bootstrap, str(tmp), tasks=args.partitions)
    counted = [0, 0]

    def read_only(rows: Iterator[Any]) -> Iterator[int]:
        for row in rows:
            yield len(read_input(settings, row)[1])

    def map_exchange(ctx: BatchContext, rows: Iterator[Any]) -> Iterator[Any]:
        for row in rows:
            rng, records = read_input(settings, row)
            if rng is not None:
                yield from map_range(ctx, rng, records)

    def count_reduce(index: int, items: Iterator[Any]) -> Iterator[int]:
        yield sum(from_ipc(item.data).num_rows for _, item in items if isinstance(item, Rows))

    def process(batch_df: Any, batch_id: int) -> None:
        from window_operator.kernel import ClockState

        if exchange:
            ctx = BatchContext(settings, batch_id, ClockState())
            n = settings.tasks
            out = (
                batch_df.rdd.mapPartitions(lambda rows: map_exchange(ctx, rows))
                .partitionBy(n + 1, lambda t: t)
                .mapPartitionsWithIndex(count_reduce)
                .collect()
            )
        else:
            out = batch_df.rdd.mapPartitions(read_only).collect()
        counted[0] += sum(out)
        counted[1] += 1

    df = read_kafka_stream(
        spark,
        bootstrap_servers=topic.bootstrap,
        topics=[topic.name],
        starting_offsets="earliest",
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        ranges=True,
    )
    checkpoint = tmp / f"bench-floor-{uuid.uuid4().hex[:8]}"
    t0 = time.perf_counter()
    query = (
        df.writeStream.foreachBatch(process)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(QUERY_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    run = Run(name, seconds, topic.events, batches=counted[1], results=counted[0])
    run.info = f"{counted[0]:,} {'rows exchanged' if exchange else 'records read'}"
    return run


# ---------------------------------------------------------------------------- running


@dataclass
class Topic:
    """An input topic on its broker, and the reference of its events (None: no check)."""

    name: str
    bootstrap: str
    events: int
    records: int
    reference: Any = None


def where_time_goes(run: Run) -> list[str]:
    """A's time by part, summed over its batches' task reports (seconds of task time)."""
    maps = [m for r in run.reports for m in r.ranges]
    tasks = [t for r in run.reports for t in r.tasks]
    batch_s = sum(r.seconds for r in run.reports)
    parts = {
        "map side (read + decode + route)": sum(m.seconds + m.seconds_read for m in maps),
        "state tasks: open + restore": sum(t.seconds_restore for t in tasks),
        "state tasks: operator": sum(t.seconds_operator for t in tasks),
        "state tasks: outputs + changelog + commit": sum(t.seconds_commit for t in tasks),
    }
    unit = "epochs" if run.name == "A-long" else "batches"
    lines = [
        f"  where {run.name}'s time goes ({len(run.reports)} {unit}, {batch_s:.1f} s in them; "
        "task seconds summed over both cores):"
    ]
    lines += [f"    {name:<44} {s:6.1f} s" for name, s in parts.items()]
    return lines


def machine() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {load:.1f} at the start"
    )


def spread(runs: list[Run]) -> str:
    rates = [r.rate for r in runs]
    if len(rates) < 2:
        return ""
    return (
        f" (runs: {', '.join(f'{x:,.0f}' for x in rates)}; median {statistics.median(rates):,.0f})"
    )


def make_topic(
    tmp: Path, cs: ClickStream, args: argparse.Namespace, keyed: bool
) -> tuple[Topic, LocalBroker]:
    broker = LocalBroker(data_dir=tmp / f"broker-{'keyed' if keyed else 'unkeyed'}")
    broker.start()
    name = f"clicks-{'keyed' if keyed else 'unkeyed'}"
    create_topic(broker.bootstrap_servers, name, args.partitions)
    produce_stream(broker.bootstrap_servers, name, cs, args.partitions, keyed=keyed)
    topic = Topic(name, broker.bootstrap_servers, args.events, args.events + args.partitions)
    return topic, broker


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=250_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", default="A,A-long,A-alo,A-keyed,B,F-read,F-exchange")
    ap.add_argument("--tmpdir", type=Path, default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from window_operator.runtime.producers import close_producers
    from window_operator.spark.session import build_session

    args = parse_args(argv)
    only = set(args.only.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="bench-pipeline-", dir=args.tmpdir))
    print(f"machine: {machine()}", flush=True)
    brokers: list[LocalBroker] = []
    try:
        cs = make_stream(args.events, args.keys)
        unkeyed, b1 = make_topic(tmp, cs, args, keyed=False)
        brokers.append(b1)
        unkeyed.reference = reference(cs)
        keyed = None
        if "A-keyed" in only:
            keyed, b2 = make_topic(tmp, cs, args, keyed=True)
            keyed.reference = unkeyed.reference
            brokers.append(b2)
        records, seconds = raw_consume_rate(unkeyed.bootstrap, unkeyed.name)
        raw = records / seconds
        spark = build_session(
            app_name="bench-pipeline", master="local[2]", conf={"spark.sql.shuffle.partitions": "4"}
        )
        contenders: dict[str, Callable[[], Run]] = {
            "A": lambda: run_ours("A", spark, unkeyed, tmp, args, "exactly_once"),
            "A-alo": lambda: run_ours("A-alo", spark, unkeyed, tmp, args, "at_least_once"),
            "A-long": lambda: run_ours("A-long", spark, unkeyed, tmp, args, "exactly_once",
                                       "long_running"),
            "B": lambda: run_spark(spark, unkeyed.bootstrap, unkeyed.name, unkeyed.events,
                                   unkeyed.records, 4, tmp, args),
            "F-read": lambda: run_floor("F-read", spark, unkeyed, tmp, args, exchange=False),
            "F-exchange": lambda: run_floor("F-exchange", spark, unkeyed, tmp, args, exchange=True),
        }  # fmt: skip
        if keyed is not None:
            contenders["A-keyed"] = lambda: run_ours(
                "A-keyed", spark, keyed, tmp, args, "exactly_once"
            )
        warm(spark, tmp, args)
        runs: dict[str, list[Run]] = {name: [] for name in contenders if name in only}
        for _ in range(args.repeat):
            for name in runs:
                runs[name].append(contenders[name]())
                print(f"  {name}: {runs[name][-1].rate:,.0f} events/s", flush=True)
        spark.stop()
        print_table(runs, raw, args)
        return 0
    except CheckFailed as exc:
        print(f"check failed: {exc}")
        return 1
    finally:
        close_producers()
        for b in brokers:
            b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def warm(spark: Any, tmp: Path, args: argparse.Namespace) -> None:
    """Start the JVM's code paths and the Python workers with tiny runs."""
    small = argparse.Namespace(
        **{**vars(args), "events": WARM_EVENTS, "max_offsets_per_trigger": WARM_EVENTS // 2}
    )
    cs = make_stream(WARM_EVENTS, 100)
    topic, broker = make_topic(tmp / "warm", cs, small, keyed=False)
    try:
        run_ours("warm", spark, topic, tmp, small, "exactly_once")
        run_ours("warm", spark, topic, tmp, small, "exactly_once", "long_running")
        run_spark(spark, topic.bootstrap, topic.name, topic.events, topic.records, 4, tmp, small)
    finally:
        broker.stop()


def print_table(runs: dict[str, list[Run]], raw: float, args: argparse.Namespace) -> None:
    best = {name: max(rs, key=lambda r: r.rate) for name, rs in runs.items() if rs}
    print(
        f"\n{args.events:,} events, {args.keys:,} keys, {args.partitions} partitions, "
        f"{args.max_offsets_per_trigger:,} per trigger, local[2]; best of {args.repeat}"
    )
    print(f"raw consume rate (one plain consumer): {raw:,.0f} records/s")
    b = best.get("B")
    for name, run in best.items():
        ratio = f"  {run.rate / b.rate:4.2f}x B" if b is not None and name != "B" else ""
        print(f"{name:<11} {run.rate:>10,.0f} events/s  {run.seconds:6.1f} s  "
              f"{run.batches:>3} batches{ratio}{spread(runs[name])}")  # fmt: skip
        if run.info:
            print(f"            {run.info}")
    if "F-read" in best:
        print(f"F-read / raw consume rate: {best['F-read'].rate / raw:.2f}")
    for name in ("A", "A-long"):
        if name in best:
            print("\n".join(where_time_goes(best[name])))
    if "A" in best and "A-alo" in best:
        a, alo = best["A"], best["A-alo"]
        print(f"cost of exactly-once: {a.seconds - alo.seconds:+.1f} s "
              f"({(a.seconds - alo.seconds) / max(a.batches, 1):+.2f} s per batch)")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
