"""Helpers for end-to-end job tests: produce a stream, run the job, read the output, oracle."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from helpers import runtime_for

from window_operator.codecs import result_decoder_for
from window_operator.config import JobConfig, load_any_config, parse_config
from window_operator.kafka_admin import KafkaAdmin
from window_operator.runtime.batch import LocalJob
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.longrun.local import LocalLongRunningJob
from window_operator.runtime.longrun.prepare import worker_spec
from window_operator.runtime.settings import TaskSettings
from window_operator.sample_data import click_stream
from window_operator.spark.topics import prepare_topics

SENTINEL_KEY = "__end__"


@dataclass
class Stream:
    """Produced events (arrival order) and where they went."""

    keys: list[str]
    ts: np.ndarray
    latency: np.ndarray
    partitions: int

    def records(self) -> list[dict[str, Any]]:
        return [
            {"page": k, "ts": int(t), "latency_ms": float(v)}
            for k, t, v in zip(self.keys, self.ts.tolist(), self.latency.tolist(), strict=True)
        ]


def input_records(topic: str, first_offset: int, events: list[dict[str, Any]]) -> InputRecords:
    """``events`` as a range of partition 0 of ``topic`` from ``first_offset`` (as a
    Kafka read gives them), keyed by their ``k``."""
    return InputRecords(
        topic=topic,
        partition=0,
        offsets=list(range(first_offset, first_offset + len(events))),
        keys=[str(e["k"]).encode() for e in events],
        values=[orjson.dumps(e) for e in events],
    )


def batch_job(
    bootstrap: str,
    unique_name: Callable[[str], str],
    state_dir: Path,
    partitions: int = 1,
    **overrides: Any,
) -> tuple[str, LocalJob]:
    """A new input topic of ``partitions`` and the micro-batch path in one process
    (:class:`LocalJob`) of a job keyed by ``k`` with event times ``ts`` over it (the
    base test job with ``overrides``), its state under ``state_dir``."""
    topic = unique_name("in")
    create_topic(bootstrap, topic, partitions)
    config = runtime_for(
        job=unique_name("job"), input={"topic": topic, "key": "k", "timestamp": "ts"}, **overrides
    ).config
    tasks = prepare_topics(config, bootstrap)
    return topic, LocalJob(TaskSettings(config, bootstrap, str(state_dir), tasks))


def join_batch_job(
    bootstrap: str,
    unique_name: Callable[[str], str],
    tmp: Path,
    join: dict[str, Any],
    **sections: Any,
) -> tuple[str, str, LocalJob]:
    """New one-partition topics of orders and shipments, and the micro-batch path in one
    process (:class:`LocalJob`) of a join of them on ``k`` with event times ``ts`` and no
    allowed lateness (``join``: its time condition and kind; ``sections``: more of the
    file), written to ``tmp/job.yaml`` for the command line, its state under ``tmp``."""
    orders, shipments = unique_name("orders"), unique_name("shipments")
    for topic in (orders, shipments):
        create_topic(bootstrap, topic, 1)
    side = {"timestamp": "ts"}
    doc = {
        "job": unique_name("job"),
        "join": {
            "left": {"name": "orders", "topic": orders, **side},
            "right": {"name": "shipments", "topic": shipments, **side},
            "on": ["k"],
            **join,
        },
        "watermark": {"allowed_lateness": 0},
        "state": {"dir": str(tmp / "state")},
        **sections,
    }
    (tmp / "job.yaml").write_text(yaml.safe_dump(doc))
    config = load_any_config(tmp / "job.yaml")
    tasks = prepare_topics(config, bootstrap)
    return orders, shipments, LocalJob(TaskSettings(config, bootstrap, str(tmp), tasks))


def create_topic(bootstrap: str, name: str, partitions: int = 4, **config: str) -> None:
    """A test input topic: kept forever (test data carries historical event times)."""
    KafkaAdmin(bootstrap).create_topic(name, partitions, {"retention.ms": "-1", **config})


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    """Grow ``topic`` to ``total`` partitions (and wait until the metadata says so)."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while KafkaAdmin(bootstrap).partition_count(topic) != total:
        assert time.monotonic() < deadline, f"{topic} did not grow to {total} partitions"
        time.sleep(0.1)


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[dict[str, Any]],
    *,
    encode: Callable[[dict[str, Any]], bytes] = orjson.dumps,
    key_field: str = "page",
    partitions: int = 4,
    raw: Sequence[tuple[bytes | None, bytes, int | None]] = (),
    round_robin: bool = False,
    timestamp_field: str | None = None,
) -> None:
    """Produce records keyed by ``key_field`` (same key, same partition), then raw ones.

    With ``round_robin`` the records are spread over the partitions in turn, each keyed by
    its event number: a key's events land in every partition. With ``timestamp_field``
    that field is taken out of each record and becomes its Kafka record timestamp.
    """
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i, rec in enumerate(records):
        if round_robin:
            key, part = f"event-{i}".encode(), i % partitions
        else:
            key = str(rec[key_field]).encode()
            part = _partition_of(key, partitions)
        stamp: dict[str, int] = {}
        if timestamp_field is not None:
            rec = dict(rec)
            stamp["timestamp"] = rec.pop(timestamp_field)
        while True:
            try:
                p.produce(topic, key=key, value=encode(rec), partition=part, **stamp)
                break
            except BufferError:
                p.poll(0.05)
    for key, value, part in raw:
        if part is None:
            p.produce(topic, key=key, value=value)
        else:
            p.produce(topic, key=key, value=value, partition=part)
    assert p.flush(60) == 0


def _partition_of(key: bytes, partitions: int) -> int:
    import zlib

    return zlib.crc32(key) % partitions


def sentinels(max_ts: int, partitions: int) -> list[tuple[bytes, dict[str, Any], int]]:
    """One far-future event per partition: moves every watermark past every real window."""
    ts = max_ts + 86_400_000
    return [
        (SENTINEL_KEY.encode(), {"page": SENTINEL_KEY, "ts": ts, "latency_ms": 0.0}, p)
        for p in range(partitions)
    ]


def produce_the_rest(
    bootstrap: str, topic: str, stream: Stream, start: int, partitions: int
) -> None:
    """``stream``'s records from ``start`` on, round-robin, then one sentinel a partition:
    a run to the end fires every real window."""
    produce(bootstrap, topic, stream.records()[start:], round_robin=True, partitions=partitions)
    ends = sentinels(int(stream.ts.max()), partitions)
    produce(bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Any]:
    """Every record of a topic (all partitions), read to the end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.time_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
        }
    )
    count = KafkaAdmin(bootstrap).partition_count(topic)
    assert count is not None, f"topic {topic} does not exist"
    parts = list(range(count))
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: list[Any] = []
    eof: set[int] = set()
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    eof = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout_s
    while len(eof) < len(parts) and time.monotonic() < deadline:
        for m in c.consume(10_000, timeout=0.05):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            out.append(m)
    c.close()
    assert len(eof) == len(parts), f"did not reach the end of {topic}"
    return out


def json_results(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every JSON result of an output topic, in offset order (tombstones left out)."""
    return [orjson.loads(m.value()) for m in read_topic(bootstrap, topic) if m.value() is not None]


def latest_results(config: JobConfig, messages: list[Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """Latest result value per (key, window_start) from the output topic (in offset order)."""
    decoder = result_decoder_for(config)
    latest: dict[tuple[str, int], tuple[int, dict[str, Any]]] = {}
    for m in messages:
        value = m.value()
        if value is None:
            continue
        r = decoder.decode(value) if hasattr(decoder, "decode") else orjson.loads(value)
        kw = (r["key"], r["window_start"])
        prev = latest.get(kw)
        if prev is None or r["update_seq"] >= prev[0]:
            latest[kw] = (r["update_seq"], r)
    return {kw: r for kw, (_, r) in latest.items()}


def oracle(stream: Stream, size: int, step: int) -> dict[tuple[str, int], dict[str, Any]]:
    """Count and mean per (key, window) from all events, recomputed from scratch."""
    sums: dict[tuple[str, int], list[float]] = {}
    for k, t, v in zip(stream.keys, stream.ts.tolist(), stream.latency.tolist(), strict=True):
        first = t - size + step
        first -= first % step
        for w in range(first, t + 1, step):
            if w <= t < w + size:
                acc = sums.setdefault((k, w), [0, 0.0])
                acc[0] += 1
                acc[1] += v
    return {kw: {"clicks": int(n), "mean_latency_ms": s / n} for kw, (n, s) in sums.items()}


def upsert_table(messages: list[Any]) -> tuple[dict[bytes, bytes], int]:
    """What a consumer of the upsert log keeps: the latest value per Kafka key (tombstones
    delete), and how many tombstones there were."""
    table: dict[bytes, bytes] = {}
    tombstones = 0
    for m in messages:
        if m.value() is None:
            tombstones += 1
            table.pop(m.key(), None)
        else:
            table[m.key()] = m.value()
    return table, tombstones


def session_clicks(table: dict[bytes, bytes]) -> dict[tuple[str, int, int], int]:
    """``clicks`` per (key, session start, session end) of an upsert table of JSON results."""
    got = {}
    for value in table.values():
        r = orjson.loads(value)
        if r["key"] != SENTINEL_KEY:
            got[(r["key"], r["window_start"], r["window_end"])] = r["values"]["clicks"]
    return got


def session_oracle(stream: Stream, gap: int) -> dict[tuple[str, int, int], int]:
    """Events per session, recomputed from scratch: sort each key's events and split where
    consecutive events are more than ``gap`` apart."""
    expected: dict[tuple[str, int, int], int] = {}
    by_key: dict[str, list[int]] = {}
    for k, t in zip(stream.keys, stream.ts.tolist(), strict=True):
        by_key.setdefault(k, []).append(t)
    for k, tss in by_key.items():
        tss.sort()
        start = prev = tss[0]
        n = 0
        for t in tss:
            if t - prev > gap:
                expected[(k, start, prev + gap)] = n
                start, n = t, 0
            n += 1
            prev = t
        expected[(k, start, prev + gap)] = n
    return expected


def make_stream(
    n: int,
    *,
    keys: int = 200,
    seed: int = 1,
    partitions: int = 4,
    events_per_second: float = 500.0,
) -> Stream:
    s = click_stream(
        n,
        n_keys=keys,
        events_per_second=events_per_second,
        out_of_order=0.1,
        max_delay_ms=20_000,
        seed=seed,
    )
    return Stream(keys=s.keys, ts=s.ts, latency=s.latency_ms, partitions=partitions)


def job_config(tmp: Path, topic: str, job: str, **overrides: Any) -> JobConfig:
    cfg: dict[str, Any] = {
        "job": job,
        "input": {"topic": topic, "key": "page", "timestamp": "ts"},
        "window": {"type": "hopping", "size": "60s", "step": "10s"},
        "aggregations": [
            {"name": "clicks", "op": "count"},
            {"name": "mean_latency_ms", "op": "mean", "field": "latency_ms"},
        ],
        "watermark": {"allowed_lateness": "5s"},
        "emit": {"late": "per_arrival"},
        "retention": {"time": "1d"},
        "state": {"dir": str(tmp / "state")},
        "spark": {"trigger": "available_now", "max_offsets_per_trigger": 30_000},
    }
    for k, v in overrides.items():
        merge = isinstance(v, dict) and k != "window"  # a window shape replaces the default
        cfg[k] = {**cfg.get(k, {}), **v} if merge else v
    return parse_config(cfg, base_dir=tmp)


def assert_matches_oracle(
    got: dict[tuple[str, int], dict[str, Any]], expected: dict[tuple[str, int], dict[str, Any]]
) -> None:
    real = {kw: r for kw, r in got.items() if kw[0] != SENTINEL_KEY}
    assert real.keys() == expected.keys(), (
        f"{len(real.keys() - expected.keys())} unexpected, "
        f"{len(expected.keys() - real.keys())} missing windows"
    )
    bad = [
        kw
        for kw, e in expected.items()
        if real[kw]["values"]["clicks"] != e["clicks"]
        or not math.isclose(
            real[kw]["values"]["mean_latency_ms"], e["mean_latency_ms"], rel_tol=1e-9
        )
    ]
    assert not bad, (
        f"{len(bad)} windows differ, e.g. {bad[0]}: {real[bad[0]]} vs {expected[bad[0]]}"
    )


def run_to_end(
    config: Any, bootstrap: str, spark: Any, timeout_s: int = 600, **options: Any
) -> Any:
    """Run ``config``'s job on Spark, in the shape its ``spark.mode`` names, until it ends
    by itself (an AvailableNow run; a failed run raises), and return it."""
    from window_operator.spark.longrun import job_for

    job = job_for(config, bootstrap_servers=bootstrap, spark=spark, **options)
    job.start()
    assert job.await_termination(timeout_s), f"the {config.spark.mode} run did not end"
    return job


def local_job(
    config: JobConfig,
    bootstrap: str,
    tmp: Path,
    workers: int,
    *,
    watch_inputs: bool = False,
    on_report: Callable[[Any], None] | None = None,
    **spec: Any,
) -> LocalLongRunningJob:
    """A long-running job of ``config`` whose ``workers`` are threads of this process
    (not started); ``spec``: :func:`worker_spec` options (``available_now=True``, ...)."""
    from window_operator.spark.topics import prepare_topics

    tasks = prepare_topics(config, bootstrap)
    settings = TaskSettings(config, bootstrap, str(config.state.dir), tasks=tasks)
    made = worker_spec(settings, workers, checkpoint_dir=tmp / "checkpoint", **spec)
    return LocalLongRunningJob(replace(made, watch_inputs=watch_inputs), on_report=on_report)


def applied(job: LocalLongRunningJob) -> int:
    """How many records the epochs ``job`` reported so far applied."""
    return sum(t.applied for r in list(job.reports) for t in r.tasks)


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Wait until ``done()`` (every 0.1 s); fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
