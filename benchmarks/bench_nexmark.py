"""Nexmark on Kafka and Spark: the jobs of ``config/nexmark/`` against Spark SQL's own queries.

Run ``python benchmarks/bench_nexmark.py``. Options: ``--events N`` (default 1,000,000),
``--queries q5,q7,q8,q11``, ``--partitions P`` (4), ``--max-offsets-per-trigger M``
(250,000), ``--rate R`` (events per second of event time, 10,000), ``--seed S``,
``--shuffle-partitions S`` (Spark's, 4), ``--repeat R`` (each contender R times, the best
counts), ``--contenders job-long,job,spark``, ``--bootstrap host:port`` (default: a
fresh local noida-db broker for the run), ``--tmpdir``. Exit status 1 when a check fails.

What it does, in one run:

1. starts a local broker and fills ``nexmark-persons`` / ``-auctions`` / ``-bids``
   (``P`` partitions each) with ``N`` events of the Nexmark generator
   (:mod:`window_operator.nexmark`), JSON with event times in epoch ms (not timed);
2. starts one ``local[2]`` Spark session and warms it up with a small stream;
3. per query, times **job-long** and **job**: this project's job in its two shapes on
   Spark (``spark.mode`` ``long_running``: :class:`LongRunningJob`; ``micro_batch``:
   :class:`StreamingJob`), AvailableNow, through the keyed exchange, exactly-once; Q8 is
   the two grouping jobs, run at the same time (one worker each when long-running), then
   the join job; and checks its output topic against the reference answer
   (:mod:`window_operator.nexmark.reference`) for exactly the windows its watermark
   closed; then **Spark**: Spark SQL's version of the query over the same topics, read
   by the same source (``read_kafka_stream``, rows), ``from_json``, the same 4 s
   watermark, ``groupBy(window | session_window)`` / the join, append mode into a memory
   sink, whose rows are compared with the reference too (shown, not required: Spark's
   watermark is the largest event time seen, not the smallest per partition);
4. prints per query the records read, seconds, rates, rates per core (cores =
   ``os.cpu_count()``, the whole machine: broker, Spark JVM and Python workers
   included), the job/Spark ratio and the Nexmark project's published Flink figure.

Events/s counts the whole generated stream (``N`` events, all kinds), as Nexmark does;
the queries read one or two of its topics (Q5, Q7, Q11 the bids: 92 % of the records;
Q8 persons and auctions: 8 %), which ``records/s`` shows. Flink's figures (Flink 1.13,
RocksDB, 8 cores, ``events/s/core``) include their queries' second stage for Q5 and Q7.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import yaml
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.errors import StreamingQueryException

from window_operator.config import JobConfig, JoinJobConfig, parse_any_config
from window_operator.kafka_admin import KafkaAdmin, wait_for_broker
from window_operator.nexmark import reference
from window_operator.nexmark.generator import NexmarkEvents
from window_operator.nexmark.model import NexmarkConfig
from window_operator.nexmark.topics import NexmarkTopics, fill_topics, partitions_of

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config" / "nexmark"
QUERIES = ("q5", "q7", "q8", "q11")
#: this job's contenders: its two shapes on Spark (``spark.mode``)
JOB_SHAPES = {"job": "micro_batch", "job-long": "long_running"}
FLINK_PER_CORE = {"q5": 22_100, "q7": 12_300, "q8": 146_100, "q11": 39_700}
TITLES = {
    "q5": "hot items (bids per auction, hop 10s/2s)",
    "q7": "highest bid (max price, tumble 10s)",
    "q8": "new users (persons x sellers, tumble 10s)",
    "q11": "user sessions (bids per bidder, gap 10s)",
}
LATENESS_MS = 4_000
WINDOW_MS = 10_000
WARM_EVENTS = 20_000
TIMEOUT_S = 1_800
AnyConfig = JobConfig | JoinJobConfig


class CheckFailed(AssertionError):
    """A job produced wrong or incomplete results."""


@dataclass
class Stream:
    """A generated stream, what the reference answers need, and where it went."""

    cfg: NexmarkConfig
    events: NexmarkEvents
    topics: NexmarkTopics
    partitions: int

    def watermark(self, kind: str) -> int | None:
        """The final watermark of a job reading the topic of ``kind``, as the oracle sees it."""
        cols = {"persons": 0, "auctions": 1, "bids": 2}[kind]
        part = partitions_of(self.cfg, self.events, self.partitions)[cols]
        times = (self.events.persons, self.events.auctions, self.events.bids)[cols].date_time
        return reference.final_watermark(times, part, self.partitions, LATENESS_MS)

    def records(self, query: str) -> int:
        """Input records the query reads."""
        if query == "q8":
            return len(self.events.persons) + len(self.events.auctions)
        return len(self.events.bids)


@dataclass
class Run:
    """One timed run of one contender on one query."""

    seconds: float
    check: str = "ok"
    info: str = ""


# ------------------------------------------------------------------------------- Kafka


def upsert_view(bootstrap: str, topic: str) -> dict[bytes, Any]:
    """The latest value of every record key of ``topic`` (tombstones delete)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-nexmark-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
        }
    )
    try:
        count = KafkaAdmin(bootstrap).partition_count(topic) or 0
        ends = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(count)
        }
        eof = {p for p, end in ends.items() if end == 0}
        c.assign([TopicPartition(topic, p, 0) for p in range(count) if p not in eof])
        view: dict[bytes, Any] = {}
        deadline = time.monotonic() + 300
        while len(eof) < count and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {err}")
                    eof.add(m.partition())
                elif m.value() is None:
                    view.pop(m.key(), None)
                else:
                    view[m.key() or b"%d/%d" % (m.partition(), m.offset())] = orjson.loads(
                        m.value()
                    )
        if len(eof) < count:
            raise CheckFailed(f"did not reach the end of {topic}")
        return view
    finally:
        c.close()


def total_records(bootstrap: str) -> int:
    """Records in every topic of the broker (it slows down past ~1.5M)."""
    admin = KafkaAdmin(bootstrap)
    parts = [(t, p) for t, n in admin.topics().items() for p in range(n)]
    ends = admin.list_offsets(parts, earliest=False, read_committed=False)
    return sum(ends.values())


# ---------------------------------------------------------------------------- the jobs


def job_config(
    name: str,
    topics: NexmarkTopics,
    run_id: str,
    tmp: Path,
    max_offsets: int,
    mode: str = "micro_batch",
    workers: int | None = None,
) -> AnyConfig:
    """``config/nexmark/<name>.yaml`` with this run's topics, job name and state directory."""
    doc = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    rename = dict(zip(NexmarkTopics.with_prefix().names(), topics.names(), strict=True))
    for base in ("q8-persons", "q8-auctions"):
        rename[f"nexmark-{base}-windows"] = f"nexmark-{base}-{run_id}-windows"
    doc["job"] = f"{doc['job']}-{run_id}"
    if "join" in doc:
        for side in ("left", "right"):
            doc["join"][side]["topic"] = rename[doc["join"][side]["topic"]]
        doc["output"] = {"topic": f"{doc['job']}-results"}
    else:
        doc["input"]["topic"] = rename[doc["input"]["topic"]]
        doc["output"] = {"topic": rename.get(doc["output"]["topic"], f"{doc['job']}-windows")}
    doc["state"] = {**doc.get("state", {}), "dir": str(tmp / doc["job"])}
    doc["spark"] = {
        "trigger": "available_now",
        "max_offsets_per_trigger": max_offsets,
        "mode": mode,
        "workers": workers,
    }
    return parse_any_config(doc, base_dir=CONFIG_DIR)


@dataclass
class Outcome:
    """How jobs run to their end went: final watermarks, batches, task retries."""

    watermarks: list[int]
    batches: int = 0
    retries: int = 0
    batch_seconds: float = 0.0
    map_seconds: float = 0.0
    task_seconds: float = 0.0

    def add(self, other: Outcome) -> None:
        """Count the jobs of ``other`` too (watermarks stay those of this one)."""
        self.batches += other.batches
        self.retries += other.retries
        self.batch_seconds += other.batch_seconds
        self.map_seconds += other.map_seconds
        self.task_seconds += other.task_seconds


def run_jobs(spark: Any, bootstrap: str, configs: list[AnyConfig]) -> Outcome:
    """Run the jobs at the same time to their end."""
    from window_operator.spark.driver import BatchReport, StreamingJob, prepare_topics
    from window_operator.spark.longrun import LongRunningJob, WorkersFailedError, job_for

    jobs: list[StreamingJob | LongRunningJob] = []
    logs = []
    for config in configs:
        prepare_topics(config, bootstrap)
        reports: list[BatchReport] = []
        jobs.append(
            job_for(config, bootstrap_servers=bootstrap, spark=spark, on_report=reports.append)
        )
        logs.append(reports)
    for job in jobs:
        job.start()
    for job in jobs:
        try:
            done = job.await_termination(TIMEOUT_S)
        except (StreamingQueryException, WorkersFailedError) as exc:
            raise CheckFailed(f"{job.config.job} failed: {exc}") from None
        if not done:
            job.stop()
            raise CheckFailed(f"{job.config.job} did not finish within {TIMEOUT_S}s")
    return Outcome(
        [r[-1].clock.watermark if r else -(2**63) for r in logs],
        batches=sum(len(r) for r in logs),
        # a task's attempts beyond the first: its batch was redone (Kafka failed it)
        retries=sum(max(t.attempts - 1, 0) for r in logs for b in r for t in b.tasks),
        batch_seconds=sum(b.seconds for r in logs for b in r),
        map_seconds=sum(m.seconds for r in logs for b in r for m in b.ranges),
        task_seconds=sum(t.seconds for r in logs for b in r for t in b.tasks),
    )


def run_ours(
    spark: Any,
    bootstrap: str,
    stream: Stream,
    query: str,
    tmp: Path,
    args: argparse.Namespace,
    mode: str = "micro_batch",
) -> Run:
    """The job(s) of ``query``, timed from start to end, then checked."""
    run_id = uuid.uuid4().hex[:6]

    def cfg(name: str, workers: int | None = None) -> AnyConfig:
        return job_config(
            name, stream.topics, run_id, tmp, args.max_offsets_per_trigger, mode, workers
        )

    t0 = time.perf_counter()
    if query == "q8":
        # two long-running jobs at once on local[2]: one worker each, so both fit
        both = 1 if mode == "long_running" else None
        outcome = run_jobs(spark, bootstrap, [cfg("q8-persons", both), cfg("q8-auctions", both)])
        final = cfg("q8")
        outcome.add(run_jobs(spark, bootstrap, [final]))
    else:
        final = cfg(query)
        outcome = run_jobs(spark, bootstrap, [final])
    run = Run(time.perf_counter() - t0)
    run.info = (
        f"{outcome.batches} batches, {outcome.batch_seconds:.1f}s in them (summed: map side "
        f"{outcome.map_seconds:.1f}s, state tasks {outcome.task_seconds:.1f}s), "
        f"{outcome.retries} task retries; "
    )
    try:
        run.info += CHECKS[query](bootstrap, final.output.topic, stream, outcome.watermarks)
    except CheckFailed as exc:
        run.check = f"FAILED: {exc}"
    return run


# -------------------------------------------------------------------------- the checks


def _expect_watermarks(stream: Stream, kinds: list[str], got: list[int]) -> list[int]:
    """The final watermarks the data implies (a partition without events holds its
    topic's watermark at the start: no window closed)."""
    want = [w if w is not None else -(2**63) for w in (stream.watermark(k) for k in kinds)]
    if want != got:
        raise CheckFailed(f"final watermarks {got}, expected {want} from the data")
    return want


def _compare(name: str, got: dict[Any, Any], want: dict[Any, Any]) -> str:
    if not want:
        raise CheckFailed(
            f"{name}: the stream closes no window, so there is nothing to check "
            "(use more --events, or a lower --rate)"
        )
    if got != want:
        extra, missing = got.keys() - want.keys(), want.keys() - got.keys()
        wrong = [k for k in got.keys() & want.keys() if got[k] != want[k]]
        sample = (wrong or sorted(extra) or sorted(missing))[:1]
        detail = [(k, got.get(k), want.get(k)) for k in sample]
        raise CheckFailed(
            f"{name}: {len(extra)} unexpected, {len(missing)} missing, {len(wrong)} wrong, "
            f"e.g. {detail}"
        )
    return f"{len(want):,} results = reference"


def _windows(bootstrap: str, topic: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["key"], r["window_start"]): r for r in upsert_view(bootstrap, topic).values()}


def check_q5(bootstrap: str, topic: str, stream: Stream, marks: list[int]) -> str:
    (wm,) = _expect_watermarks(stream, ["bids"], marks)
    want = reference.q5_hot_items(stream.events.bids, watermark=wm)
    got = {(int(k), s): r["values"]["num"] for (k, s), r in _windows(bootstrap, topic).items()}
    return _compare("q5", got, want)


def check_q7(bootstrap: str, topic: str, stream: Stream, marks: list[int]) -> str:
    (wm,) = _expect_watermarks(stream, ["bids"], marks)
    want = reference.q7_highest_bid(stream.events.bids, watermark=wm)
    got = {s: int(r["values"]["maxprice"]) for (_, s), r in _windows(bootstrap, topic).items()}
    return _compare("q7", got, want)


def check_q11(bootstrap: str, topic: str, stream: Stream, marks: list[int]) -> str:
    (wm,) = _expect_watermarks(stream, ["bids"], marks)
    want = {
        k: (s.end, s.bids)
        for k, s in reference.q11_user_sessions(stream.events.bids, watermark=wm).items()
    }
    got = {
        (int(k), s): (r["window_end"], r["values"]["bid_count"])
        for (k, s), r in _windows(bootstrap, topic).items()
    }
    return _compare("q11", got, want)


def check_q8(bootstrap: str, topic: str, stream: Stream, marks: list[int]) -> str:
    wp, wa = _expect_watermarks(stream, ["persons", "auctions"], marks)
    wm = None if wp is None or wa is None else min(wp, wa)
    want = reference.q8_new_users(stream.events.persons, stream.events.auctions, watermark=wm)
    pairs = [r for r in upsert_view(bootstrap, topic).values() if r.get("kind") == "MATCH"]
    got = {
        (int(p["left"]["key"]), p["left"]["window_start"]): p["left"]["values"]["name"]
        for p in pairs
    }
    if len(got) != len(pairs):
        raise CheckFailed(f"q8: {len(pairs) - len(got)} duplicate pairs")
    return _compare("q8", got, want)


CHECKS: dict[str, Callable[[str, str, Stream, list[int]], str]] = {
    "q5": check_q5,
    "q7": check_q7,
    "q8": check_q8,
    "q11": check_q11,
}


# ------------------------------------------------------------------ Spark's own queries


SCHEMAS = {
    "persons": "id BIGINT, name STRING, dateTime BIGINT",
    "auctions": "seller BIGINT, dateTime BIGINT",
    "q5": "auction BIGINT, dateTime BIGINT",
    "q7": "price BIGINT, dateTime BIGINT",
    "q11": "bidder BIGINT, dateTime BIGINT",
}


def spark_source(spark: Any, bootstrap: str, topic: str, schema: str, max_offsets: int) -> Any:
    """Rows of a topic as typed columns plus ``ts``, with the 4 s watermark."""
    from pyspark.sql import functions as F

    from window_operator.spark.kafka_source import read_kafka_stream

    raw = read_kafka_stream(
        spark, bootstrap_servers=bootstrap, topics=[topic], max_offsets_per_trigger=max_offsets
    )
    return (
        raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
        .select("e.*")
        .withColumn("ts", F.timestamp_millis("dateTime"))
        .withWatermark("ts", f"{LATENESS_MS // 1000} seconds")
    )


def spark_query(
    spark: Any, bootstrap: str, topics: NexmarkTopics, query: str, max_offsets: int
) -> Any:
    """Spark SQL's version of ``query``: a streaming DataFrame of its results."""
    from pyspark.sql import functions as F

    size = f"{WINDOW_MS // 1000} seconds"
    ms = F.unix_millis
    if query == "q8":
        p = spark_source(spark, bootstrap, topics.persons, SCHEMAS["persons"], max_offsets)
        a = spark_source(spark, bootstrap, topics.auctions, SCHEMAS["auctions"], max_offsets)
        pw = p.groupBy(F.window("ts", size).alias("pw"), "id", "name").count()
        aw = a.groupBy(F.window("ts", size).alias("aw"), "seller").count()
        joined = pw.join(aw, (pw.id == aw.seller) & (pw.pw == aw.aw))
        return joined.select(
            F.col("id").alias("k"), ms(F.col("pw.start")).alias("ws"), F.col("name").alias("v")
        )
    bids = spark_source(spark, bootstrap, topics.bids, SCHEMAS[query], max_offsets)
    if query == "q5":
        g = bids.groupBy(F.window("ts", size, "2 seconds").alias("w"), "auction").count()
        return g.select(
            F.col("auction").alias("k"), ms(F.col("w.start")).alias("ws"), F.col("count").alias("v")
        )
    if query == "q7":
        g = bids.groupBy(F.window("ts", size).alias("w")).agg(F.max("price").alias("v"))
        return g.select(F.lit(0).alias("k"), ms(F.col("w.start")).alias("ws"), "v")
    g = bids.groupBy(F.session_window("ts", size).alias("w"), "bidder").count()
    return g.select(
        F.col("bidder").alias("k"),
        ms(F.col("w.start")).alias("ws"),
        F.struct(ms(F.col("w.end")).alias("end"), F.col("count").alias("n")).alias("v"),
    )


def spark_reference(stream: Stream, query: str) -> dict[tuple[int, int], Any]:
    """The reference answer of ``query`` over every window, keyed as Spark's rows are."""
    ev = stream.events
    if query == "q5":
        return dict(reference.q5_hot_items(ev.bids))
    if query == "q7":
        return {(0, s): p for s, p in reference.q7_highest_bid(ev.bids).items()}
    if query == "q8":
        return dict(reference.q8_new_users(ev.persons, ev.auctions))
    return {k: (s.end, s.bids) for k, s in reference.q11_user_sessions(ev.bids).items()}


def run_spark(
    spark: Any, bootstrap: str, stream: Stream, query: str, tmp: Path, args: argparse.Namespace
) -> Run:
    """Spark's version of ``query`` into a memory sink, timed from start to end."""
    name = f"nexmark_{query}_{uuid.uuid4().hex[:6]}"
    df = spark_query(spark, bootstrap, stream.topics, query, args.max_offsets_per_trigger)
    writer = (
        df.writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(tmp / name))
        .trigger(availableNow=True)
    )
    t0 = time.perf_counter()
    q = writer.start()
    try:
        done = q.awaitTermination(TIMEOUT_S)
    except StreamingQueryException as exc:
        return Run(time.perf_counter() - t0, check=f"FAILED: {str(exc).splitlines()[0]}")
    run = Run(time.perf_counter() - t0)
    if not done:
        q.stop()
        run.check = "FAILED: timed out"
        return run
    rows = spark.table(name).collect()
    want = spark_reference(stream, query)

    def value(v: Any) -> Any:
        return (v["end"], v["n"]) if query == "q11" else v

    got = {(r["k"], r["ws"]): value(r["v"]) for r in rows}
    wrong = sum(1 for k, v in got.items() if want.get(k) != v)
    run.info = f"{len(rows):,} rows, {wrong:,} differ from the reference"
    spark.catalog.dropTempView(name)
    return run


# ------------------------------------------------------------------------------ report


def machine() -> str:
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"machine: {cpu}, os.cpu_count()={os.cpu_count()}, Python {platform.python_version()}, "
        f"pyspark {version('pyspark')}, confluent-kafka {version('confluent-kafka')}"
    )


def load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return "load average " + " ".join(f.read().split()[:3])
    except OSError:
        return "load average ?"


def best(runs: list[Run]) -> Run:
    ok = [r for r in runs if r.check == "ok"] or runs
    return min(ok, key=lambda r: r.seconds)


def print_table(stream: Stream, results: dict[str, dict[str, list[Run]]]) -> None:
    cores = os.cpu_count() or 1
    n = len(stream.events)
    head = (
        f"{'query':5} {'job':9} {'reads':>9} {'job s':>7} {'job ev/s':>10} {'/core':>8} "
        f"{'records/s':>10} {'Spark s':>8} {'Spark ev/s':>10} {'/core':>8} {'job/Spark':>9} "
        f"{'Flink/core':>10}"
    )
    print(head)
    print("-" * len(head))
    for q, runs in results.items():
        b = best(runs["spark"])
        rb = n / b.seconds
        for who in (w for w in JOB_SHAPES if runs.get(w)):
            a = best(runs[who])
            ra = n / a.seconds
            print(
                f"{q:5} {who:9} {stream.records(q):>9,} {a.seconds:>7.2f} {ra:>10,.0f} "
                f"{ra / cores:>8,.0f} {stream.records(q) / a.seconds:>10,.0f} "
                f"{b.seconds:>8.2f} {rb:>10,.0f} {rb / cores:>8,.0f} {rb and ra / rb:>8.2f}x "
                f"{FLINK_PER_CORE[q]:>10,}"
                + ("  (a check FAILED, see below)" if {a.check, b.check} != {"ok"} else "")
            )
    print()
    for q, runs in results.items():
        print(f"{q}: {TITLES[q]}")
        for who, rs in runs.items():
            for r in rs:
                print(f"  {who:9} {r.seconds:7.2f}s  check: {r.check}; {r.info}")


# -------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--events",
        type=int,
        default=1_000_000,
        help="events in the stream, all kinds (default %(default)s)",
    )
    p.add_argument(
        "--queries",
        default=",".join(QUERIES),
        help="comma list of {} (default: all)".format(" / ".join(QUERIES)),
    )
    p.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions of each Nexmark topic (default %(default)s)",
    )
    p.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=250_000,
        help="most records of a micro-batch (long-running: of an epoch), in the jobs "
        "and Spark's queries alike (default %(default)s)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=10_000.0,
        help="events per second of event time (default %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of every random draw (default %(default)s)"
    )
    p.add_argument(
        "--shuffle-partitions",
        type=int,
        default=4,
        help="Spark's spark.sql.shuffle.partitions (default %(default)s)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each contender per query; the best counts (default %(default)s)",
    )
    p.add_argument(
        "--contenders",
        default="job-long,job,spark",
        help="comma list of job-long (spark.mode long_running), job (micro_batch) and "
        "spark, which is always run (default: all three)",
    )
    p.add_argument(
        "--bootstrap", default=None, help="an existing broker (default: a fresh local one)"
    )
    p.add_argument(
        "--tmpdir",
        default=None,
        help="an existing directory for the run's state and checkpoints (default: the "
        "system's temporary directory)",
    )
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    args.queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    if "spark" not in args.contenders or not set(args.contenders) <= {*JOB_SHAPES, "spark"}:
        p.error(f"--contenders takes spark and some of {','.join(JOB_SHAPES)}")
    unknown = set(args.queries) - set(QUERIES)
    if unknown or not args.queries:
        p.error(f"--queries takes some of {','.join(QUERIES)}")
    if min(args.events, args.partitions, args.max_offsets_per_trigger, args.repeat) < 1:
        p.error("--events, --partitions, --max-offsets-per-trigger and --repeat must be >= 1")
    if args.tmpdir is not None and not Path(args.tmpdir).is_dir():
        why = "is not a directory" if Path(args.tmpdir).exists() else "does not exist"
        p.error(f"--tmpdir {args.tmpdir} {why}")
    return args


def make_stream(bootstrap: str, events: int, prefix: str, args: argparse.Namespace) -> Stream:
    cfg = NexmarkConfig(rate=args.rate, base_time=int(time.time() * 1000), seed=args.seed)
    topics = NexmarkTopics.with_prefix(prefix)
    pieces: list[NexmarkEvents] = []
    report = fill_topics(
        bootstrap, cfg, events, topics=topics, partitions=args.partitions, on_piece=pieces.append
    )
    log(f"  {report.events:,} events ({report.persons:,} persons, {report.auctions:,} auctions, "
        f"{report.bids:,} bids) over {(report.last_time or 0) - (report.first_time or 0):,} ms "
        f"of event time, produced in {report.seconds:.1f}s")  # fmt: skip
    return Stream(cfg, NexmarkEvents.concat(pieces), topics, args.partitions)


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def warm_up(spark: Any, bootstrap: str, tmp: Path, args: argparse.Namespace) -> None:
    """A small stream through both contenders, so the timed runs start warm."""
    # 40 s of event time: windows close, so the warm-up checks results too
    slow = argparse.Namespace(**{**vars(args), "rate": WARM_EVENTS / 40.0})
    stream = make_stream(bootstrap, WARM_EVENTS, f"warm-{uuid.uuid4().hex[:6]}-", slow)
    for q in ("q7", "q8"):
        for who in args.contenders:
            r = contender(who)(spark, bootstrap, stream, q, tmp, args)
            log(f"  warm-up {q} {who}: {r.seconds:.1f}s, check {r.check}")


def contender(who: str) -> Callable[..., Run]:
    """How to run contender ``who`` (a job shape, or ``spark``)."""
    if who == "spark":
        return run_spark
    mode = JOB_SHAPES[who]
    return lambda *a: run_ours(*a, mode=mode)


def run_all(
    spark: Any, bootstrap: str, stream: Stream, tmp: Path, args: argparse.Namespace
) -> dict[str, dict[str, list[Run]]]:
    results: dict[str, dict[str, list[Run]]] = {}
    for q in args.queries:
        results[q] = {who: [] for who in args.contenders}
        for i in range(args.repeat):
            for who in args.contenders:
                try:
                    r = contender(who)(spark, bootstrap, stream, q, tmp, args)
                except CheckFailed as exc:
                    r = Run(float("inf"), check=f"FAILED: {exc}")
                results[q][who].append(r)
                log(f"{q} {who} ({i + 1}/{args.repeat}): {r.seconds:.2f}s, check {r.check}")
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from window_operator.broker import LocalBroker
    from window_operator.spark.session import build_session

    tmp = Path(tempfile.mkdtemp(prefix="bench-nexmark-", dir=args.tmpdir))
    broker, spark = None, None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
            wait_for_broker(bootstrap)
        else:
            broker = LocalBroker().start()
            bootstrap = broker.bootstrap_servers
        print(machine())
        print(f"{load()} at the start; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
        log(f"generating and producing {args.events:,} events ...")
        stream = make_stream(bootstrap, args.events, f"nexmark-{uuid.uuid4().hex[:6]}-", args)
        log("starting Spark (local[2]) and warming up ...")
        spark = build_session(
            app_name="bench-nexmark",
            master="local[2]",
            conf={"spark.sql.shuffle.partitions": str(args.shuffle_partitions)},
        )
        warm_up(spark, bootstrap, tmp, args)
        results = run_all(spark, bootstrap, stream, tmp, args)
        print(
            f"workload: Nexmark generator, {len(stream.events):,} events at {args.rate:,.0f} "
            f"events/s of event time (seed {args.seed}), JSON, {args.partitions} partitions per "
            f"topic; maxOffsetsPerTrigger {args.max_offsets_per_trigger:,}, AvailableNow, "
            f"local[2], Spark shuffle partitions {args.shuffle_partitions}; watermark 4 s"
        )
        print(f"{load()} at the end; {total_records(bootstrap):,} records on the broker")
        print()
        print_table(stream, results)
        failed = [
            f"{q} {who}" for q, rs in results.items() for who, runs in rs.items()
            for r in runs if r.check != "ok"
        ]  # fmt: skip
        print()
        print(f"check: FAILED ({', '.join(failed)})" if failed else "check: ok")
        return 1 if failed else 0
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
