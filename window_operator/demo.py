"""``window-operator demo``: the whole product on one machine, stopping by itself.

Starts a local Kafka-protocol broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` names one),
produces a live click stream (event times around now, ~10% out of order, some late,
a few broken records), runs the streaming job of ``config/clicks.yaml`` on local Spark,
prints every window result as it arrives on the output topic, and stops once the input
is processed and the late-update timer has had its turn. At the end it prints a summary
from the job's metrics (late, rejected by reason, results by kind) and writes a PNG
chart of the results over time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from window_operator.codecs.result_json import decode_result_key
from window_operator.config import JobConfig, load_config
from window_operator.job import build_runtime
from window_operator.kafka_admin import KafkaAdmin
from window_operator.observe.chart import ResultPoint, write_results_chart
from window_operator.observe.logs import kafka_logger

if TYPE_CHECKING:
    from window_operator.observe.metrics import JobMetrics
    from window_operator.spark.driver import StreamingJob
    from window_operator.spark.longrun import LongRunningJob

__all__ = ["CLICK_FIELDS", "clicks_unread", "run_demo"]

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "clicks.yaml"
#: The fields of the clicks the demo streams (:meth:`ClickStream.records`), as JSON with
#: the event time ``ts`` in epoch milliseconds.
CLICK_FIELDS = ("page", "ts", "latency_ms")


def clicks_unread(config: JobConfig) -> str | None:
    """What of the demo's clicks ``config`` cannot read (``None``: it reads them)."""
    inp = config.input
    if inp.format != "json":
        return f"reads {inp.format}"
    if inp.kafka_key:
        return "groups by the Kafka record key, not by a field of the clicks"
    if inp.timestamp_from == "kafka":
        return "takes its event time from the Kafka record timestamps, not the clicks' ts"
    if inp.timestamp != "ts" or inp.timestamp_unit != "ms":
        return f"takes its event time from {inp.timestamp!r} in {inp.timestamp_unit}"
    wanted = (*inp.key_fields, *config.value_fields())
    if missing := [f for f in dict.fromkeys(wanted) if f not in CLICK_FIELDS]:
        return f"reads {', '.join(map(repr, missing))}"
    return None


_BAD_RECORDS = [
    b'{"page": "/home", "ts": 17',  # broken JSON
    b'{"page": "/home", "latency_ms": 12.5}',  # no timestamp
    b'{"page": "/cart", "ts": "yesterday", "latency_ms": 3.0}',  # not a timestamp
]


def _fmt_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S")


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def _printer(
    bootstrap: str,
    config: JobConfig,
    out: TextIO,
    stop: threading.Event,
    seen: list[ResultPoint],
) -> None:
    from confluent_kafka import Consumer

    from window_operator.codecs import result_decoder_for

    decoder = result_decoder_for(config)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-printer-{time.time_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "logger": kafka_logger(),
        }
    )
    consumer.subscribe([config.output.topic])
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, timeout=0.3):
                if msg.error():
                    continue
                # a RETRACT is a tombstone on its window's key
                value = msg.value()
                r = _retraction(msg.key()) if value is None else decoder.decode(value)
                if r is None:
                    continue
                seen.append(_point(config, r))
                print(_line(r), file=out, flush=True)
    finally:
        consumer.close()


def _line(r: dict[str, Any]) -> str:
    """A result as the demo prints it (a RETRACT: its window only)."""
    line = f"{r['kind']:<8} {r['key']:<10} [{_fmt_time(r['window_start'])}, "
    line += f"{_fmt_time(r['window_end'])})"
    if r["kind"] == "RETRACT":
        return line
    values = "  ".join(f"{k}={_fmt_value(v)}" for k, v in r["values"].items())
    return f"{line}  #{r['update_seq']}  {values}"


def _retraction(key: bytes | None) -> dict[str, Any] | None:
    """A tombstone's window (its Kafka key) as a RETRACT result (``None``: a key that
    names no window)."""
    try:
        window = decode_result_key(key) if key is not None else None
    except (ValueError, KeyError, TypeError):  # orjson's JSONDecodeError is a ValueError
        return None
    if window is None:
        return None
    return {
        "key": window.key,
        "window_start": window.window_start,
        "window_end": window.window_end,
        "kind": "RETRACT",
        "values": {},
    }


def _point(config: JobConfig, r: dict[str, Any]) -> ResultPoint:
    """A result for the chart: the value of the job's first aggregation."""
    value = (r.get("values") or {}).get(config.aggregations[0].name)
    number = float(value) if isinstance(value, int | float) else float("nan")
    end = r.get("window_end")
    return ResultPoint(
        str(r["key"]),
        int(r["window_start"]),
        str(r["kind"]),
        number,
        int(end) if isinstance(end, int) else None,
    )


def _produce_stream(
    bootstrap: str, topic: str, events: int, seconds: float, stop: threading.Event
) -> int:
    """Produce ``events`` clicks over ``seconds`` of wall time (until ``stop`` is set);
    returns records produced."""
    import zlib

    from confluent_kafka import Producer

    from window_operator.sample_data import click_stream

    now = int(time.time() * 1000)
    # event time runs 4x faster than the wall clock so windows close during the demo
    span_ms = max(1, int(seconds * 4000))
    stream = click_stream(
        events,
        n_keys=6,
        start_ms=now - span_ms,
        events_per_second=events / (span_ms / 1000),
        out_of_order=0.1,
        max_delay_ms=40_000,
        seed=int(now) % 1000,
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": kafka_logger()})
    records = stream.records()
    chunks = 20
    per_chunk = max(1, len(records) // chunks)
    produced = 0
    for c in range(0, len(records), per_chunk):
        if stop.is_set():
            break
        for rec in records[c : c + per_chunk]:
            key = str(rec["page"]).encode()
            producer.produce(topic, key=key, value=orjson.dumps(rec), partition=zlib.crc32(key) % 4)
            produced += 1
        if c == per_chunk * 3:
            for i, bad in enumerate(_BAD_RECORDS):
                producer.produce(topic, key=b"bad", value=bad, partition=i % 4)
                produced += 1
        producer.flush(10)
        stop.wait(seconds / chunks)
    producer.flush(10)
    return produced


def _demo_config(
    base: JobConfig, config_path: Path, tmp: str, mode: str = "micro_batch"
) -> JobConfig:
    """``base`` with topics, state and checkpoint of its own for this run."""
    from window_operator.config import parse_config

    run_id = str(int(time.time()))
    data = orjson.loads(base.model_dump_json())
    data["input"]["topic"] = f"clicks-demo-{run_id}"
    data["output"]["topic"] = f"clicks-demo-{run_id}-windows"
    data["output"]["errors_topic"] = f"clicks-demo-{run_id}-errors"
    data["output"].pop("avro_schema", None)
    data["state"] = {"dir": f"{tmp}/state"}
    data["spark"] = {"trigger": "2s", "checkpoint_dir": f"{tmp}/checkpoint", "mode": mode}
    data["job"] = f"clicks-demo-{run_id}"
    return parse_config(data, base_dir=config_path.parent)


def _stream_and_wait(
    job: StreamingJob | LongRunningJob,
    config: JobConfig,
    bootstrap: str,
    events: int,
    seconds: float,
    stop: threading.Event,
) -> None:
    """Produce the click stream, wait until the job has taken every record, then a bit
    (until ``stop`` is set: Ctrl-C)."""
    produced = _produce_stream(bootstrap, config.input.topic, events, seconds, stop)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not stop.is_set():
        t = job.run_totals.totals
        if t.get("applied", 0) + t.get("rejected", 0) >= produced:
            break
        stop.wait(0.5)
    # let the late-update period (10 s) pass so batched LATE results go out too
    stop.wait(config.emit.late.period_ms / 1000 + 4)


def run_demo(
    *,
    config_path: Path = DEFAULT_CONFIG,
    events: int = 3000,
    seconds: float = 30.0,
    out: TextIO,
    err: TextIO,
    chart: Path | None = None,
    mode: str = "micro_batch",
) -> int:
    """Run the demo; returns the number of window results printed.

    The chart goes to ``chart`` (default: ``window-operator-demo.png`` in the run's
    temporary directory).

    With ``KAFKA_BOOTSTRAP_SERVERS`` set, a broker there that does not answer raises
    :class:`~window_operator.kafka_admin.BrokerUnreachableError` within seconds.
    """
    from window_operator.broker import LocalBroker

    base = load_config(config_path)
    build_runtime(base, source=str(config_path))  # its operations, before a broker starts
    broker: LocalBroker | None = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    tmp = Path(tempfile.mkdtemp(prefix="window-operator-demo-"))
    chart_path = chart or tmp / "window-operator-demo.png"
    try:
        if not bootstrap:
            print("demo: starting a local Kafka-protocol broker (noida-db) ...", file=err)
            broker = LocalBroker().start()
            bootstrap = broker.bootstrap_servers
        config = _demo_config(base, config_path, str(tmp), mode)
        KafkaAdmin(bootstrap).create_topic(
            config.input.topic,
            4,
            {"retention.ms": "-1"},
            replication_factor=config.kafka.replication_factor,
        )
        return _run_job(config, bootstrap, events, seconds, out, err, chart_path)
    finally:
        if broker is not None:
            broker.stop()
        # the run's state and checkpoint go; the chart stays where it was written
        if chart is not None or not chart_path.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            for path in tmp.iterdir():
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                elif path != chart_path:
                    path.unlink(missing_ok=True)


def _run_job(
    config: JobConfig,
    bootstrap: str,
    events: int,
    seconds: float,
    out: TextIO,
    err: TextIO,
    chart: Path,
) -> int:
    """Start Spark and the job, stream the clicks, print the results; the printed count."""
    from window_operator.observe import attach
    from window_operator.observe.lag import InputLag
    from window_operator.observe.metrics import JobMetrics
    from window_operator.observe.spark_progress import mute_cancel_warnings, mute_trigger_lag
    from window_operator.spark.driver import StreamingJob
    from window_operator.spark.longrun import job_for
    from window_operator.spark.session import build_session

    stop = threading.Event()
    seen: list[ResultPoint] = []
    printer = threading.Thread(
        target=_printer, args=(bootstrap, config, out, stop, seen), daemon=True
    )
    print("demo: starting Spark (local mode) ...", file=err)
    spark = build_session(app_name="window-operator-demo", master="local[2]")
    mute_trigger_lag(spark)
    job = job_for(config, bootstrap_servers=bootstrap, spark=spark)
    metrics = JobMetrics(config, lag=InputLag(bootstrap, [config.input.topic]))
    job.add_observer(metrics)
    # Ctrl-C (or SIGTERM) lets the running micro-batch finish, as `run` does: a stop in
    # the middle of one printed a thousand lines of Java and py4j stack
    interrupted = threading.Event()
    previous = attach.catch_interrupts(interrupted)
    try:
        job.start()
        printer.start()
        print(
            f"demo: producing {events} clicks over {seconds:.0f}s (10% out of order, some "
            "late, 3 broken) to topic " + config.input.topic,
            file=err,
        )
        print("kind     key        window               seq values", file=out, flush=True)
        _stream_and_wait(job, config, bootstrap, events, seconds, interrupted)
        if interrupted.is_set() and isinstance(job, StreamingJob):
            attach.stop_between_batches(job)
    finally:
        stop.set()
        mute_cancel_warnings(spark)
        job.stop()
        if printer.ident is not None:  # it started (the job's start may have raised)
            printer.join(5)
        spark.stop()
        attach.release_interrupts(previous)
    _summary(config, metrics, len(seen), err)
    path = write_results_chart(seen, chart, config.aggregations[0].name)
    print(f"demo: chart of the results over time (late updates marked): {path}", file=err)
    if interrupted.is_set():
        raise KeyboardInterrupt  # exit status 130, after the summary
    return len(seen)


def _summary(config: JobConfig, metrics: JobMetrics, printed: int, err: TextIO) -> None:
    """The closing lines, from the job's metrics."""
    s = metrics.summary()
    rejected = sum(s.rejected.values())
    reasons = ", ".join(f"{code} {n}" for code, n in sorted(s.rejected.items())) or "none"
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(s.results.items())) or "none"
    print(
        f"demo: {s.applied} events applied, {rejected} rejected (in topic "
        f"{config.output.errors_topic}), {printed} window results printed; windows still "
        "open at the end are not final yet.",
        file=err,
    )
    print(
        f"demo: metrics: {s.read} records read in {s.batches} "
        f"{'epochs' if config.spark.long_running else 'micro-batches'}, {s.late} late "
        f"events applied; rejected by reason: {reasons}; results by kind: {kinds}; "
        f"input lag {s.lag}",
        file=err,
    )
