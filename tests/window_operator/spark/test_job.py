"""End to end on a real broker and real Spark (local[2]): Kafka -> job -> Kafka."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import orjson
import pytest
from jobkit import (
    assert_matches_oracle,
    create_topic,
    job_config,
    json_results,
    latest_results,
    make_stream,
    oracle,
    produce,
    read_topic,
    run_to_end,
    sentinels,
    session_clicks,
    session_oracle,
    upsert_table,
)

from window_operator.codecs import result_decoder_for
from window_operator.policies import NO_WATERMARK
from window_operator.spark.driver import BatchReport, StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

N_EVENTS = 50_000


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_json_end_to_end_matches_the_oracle(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    guarantee: str,
) -> None:
    topic = unique_name("clicks")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(N_EVENTS)
    produce(kafka_bootstrap, topic, stream.records())
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        processing={"guarantee": guarantee},
        spark={"max_offsets_per_trigger": 15_000},
    )
    job = run_to_end(config, kafka_bootstrap, spark)
    assert job.run_totals.batches >= 3  # the backlog was split into several micro-batches
    totals = job.run_totals.totals
    assert totals["applied"] == N_EVENTS + 4 and totals["rejected"] == 0
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
    kinds = {r["kind"] for r in got.values()}
    assert "LATE" in kinds  # late events re-emitted their windows


@pytest.mark.parametrize("key_format", ["string", "bytes"])
def test_the_kafka_record_key_and_timestamp_as_key_and_event_time_match_the_oracle(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    key_format: str,
) -> None:
    """``key_from: kafka`` and ``timestamp_from: kafka``: the records carry neither a key
    nor a time field; each one's Kafka key and timestamp are its key and event time (late
    events included). With ``key_format: bytes`` the key is the hexadecimal text of the
    record key's bytes."""
    topic = unique_name("stamped")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(3_000)

    def latency_only(record: dict[str, Any]) -> bytes:
        return orjson.dumps({"latency_ms": record["latency_ms"]})

    produce(kafka_bootstrap, topic, stream.records(), encode=latency_only, timestamp_field="ts")
    ends = sentinels(int(stream.ts.max()), 4)
    # stamped now, a day or more after the stream: they close every window
    produce(kafka_bootstrap, topic, [], raw=[(k, latency_only(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        input={
            "key": None,
            "key_from": "kafka",
            "key_format": key_format,
            "timestamp": None,
            "timestamp_from": "kafka",
        },
        spark={"max_offsets_per_trigger": 1_000},
    )
    job = run_to_end(config, kafka_bootstrap, spark)
    assert job.run_totals.totals["applied"] == 3_000 + 4
    assert job.run_totals.totals["rejected"] == 0
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    if key_format == "bytes":  # keyed by the hexadecimal text of the keys' UTF-8 bytes
        got = {(bytes.fromhex(k).decode(), w): r for (k, w), r in got.items()}
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
    assert "LATE" in {r["kind"] for r in got.values()}


def test_avro_in_avro_out_matches_the_oracle(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    schema_path = tmp_path / "click.avsc"
    shutil.copy(Path("config/schemas/click.avsc"), schema_path)
    schema = fastavro.parse_schema(orjson.loads(schema_path.read_bytes()))
    import io

    def encode(rec: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, rec)
        return buf.getvalue()

    topic = unique_name("clicks-avro")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(20_000, seed=2)
    produce(kafka_bootstrap, topic, stream.records(), encode=encode)
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, encode(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        input={"format": "avro", "avro_schema": str(schema_path)},
        output={"format": "avro"},
    )
    run_to_end(config, kafka_bootstrap, spark)
    messages = read_topic(kafka_bootstrap, config.output.topic)
    # values really are Avro, readable with the derived schema
    assert result_decoder_for(config).decode(messages[0].value()) is not None
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(messages[0].value())
    got = latest_results(config, messages)
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_bad_input_goes_to_the_error_topic_and_the_job_keeps_running(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("clicks-bad")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(5_000, seed=6)
    bad: list[tuple[bytes | None, bytes | None, str]] = [
        (b"k1", b'{"page": "/a", "ts": 17000', "BAD_JSON"),
        (b"k2", b"not json at all", "BAD_JSON"),
        (b"k3", b'{"page": "/a", "latency_ms": 3.0}', "MISSING_TIMESTAMP"),
        (b"k4", b'{"page": "/a", "ts": "yesterday", "latency_ms": 3.0}', "BAD_TIMESTAMP"),
        (b"k5", b'{"page": "/a", "ts": 1700000000000, "latency_ms": "slow"}', "WRONG_TYPE"),
        (b"k6", b'{"page": ["/a"], "ts": 1700000000000, "latency_ms": 1.0}', "BAD_KEY"),
        (b"k7", orjson.dumps({"page": "x" * 10_000, "ts": 1_700_000_000_000}), "BAD_KEY"),
        (b"k8", b"[1, 2, 3]", "NOT_AN_OBJECT"),
        (b"k9", None, "BAD_JSON"),  # a tombstone on the input topic
    ]
    records = stream.records()
    produce(kafka_bootstrap, topic, records[:2_500])
    produce(kafka_bootstrap, topic, [], raw=[(k, v, i % 4) for i, (k, v, _) in enumerate(bad)])
    produce(kafka_bootstrap, topic, records[2_500:])
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"max_offsets_per_trigger": 2_000}
    )
    job = run_to_end(config, kafka_bootstrap, spark)
    assert job.run_totals.totals["rejected"] == len(bad)
    assert job.run_totals.totals["applied"] == len(records) + 4
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    assert len(errors) == len(bad)
    by_key = {m.key(): m for m in errors}
    for key, value, code in bad:
        m = by_key[key]
        headers = dict(m.headers())
        assert headers["error.code"].decode() == code
        assert headers["error.reason"]  # a human-readable reason
        assert headers["source.topic"].decode() == topic
        assert m.value() == value  # the original bytes, replayable as they are
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_session_windows_end_to_end_with_retractions_as_tombstones(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("clicks-sessions")
    create_topic(kafka_bootstrap, topic, 4)
    # sparse per key (a key every ~10 s on average): sessions split, and delayed
    # events bridge or extend sessions that were already emitted
    stream = make_stream(8_000, keys=300, seed=9, events_per_second=30.0)
    produce(kafka_bootstrap, topic, stream.records())
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    gap = 20_000
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "session", "gap": gap},
        watermark={"allowed_lateness": "2s"},
        spark={"max_offsets_per_trigger": 1_500},
    )
    run_to_end(config, kafka_bootstrap, spark)
    # a consumer of the upsert log: the latest value per Kafka key, tombstones delete
    table, tombstones = upsert_table(read_topic(kafka_bootstrap, config.output.topic))
    assert tombstones > 0  # late events merged or extended sessions already emitted
    assert session_clicks(table) == session_oracle(stream, gap)


def test_timers_fire_without_new_input(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A batched LATE result goes out on a timer tick after the input has gone quiet."""
    import time

    topic = unique_name("clicks-quiet")
    create_topic(kafka_bootstrap, topic, 1)
    base = 1_700_000_000_000
    events = [
        {"page": "/a", "ts": base + 1_000, "latency_ms": 1.0},
        {"page": "/a", "ts": base + 30_000, "latency_ms": 1.0},  # the first window fires
        {"page": "/a", "ts": base + 100_000, "latency_ms": 1.0},
    ]
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "tumbling", "size": "10s"},
        watermark={"allowed_lateness": "0s"},
        emit={"late": "2s"},
        spark={"trigger": "1s", "max_offsets_per_trigger": None},
    )
    job = StreamingJob(config, bootstrap_servers=kafka_bootstrap, spark=spark)
    job.start()
    try:
        produce(kafka_bootstrap, topic, events, partitions=1)
        deadline = time.monotonic() + 60
        while job.run_totals.totals.get("applied", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        # a late event for the window [1_700_000_000_000, +10s), then silence
        produce(
            kafka_bootstrap,
            topic,
            [{"page": "/a", "ts": base + 2_000, "latency_ms": 1.0}],
            partitions=1,
        )
        late = []
        while not late and time.monotonic() < deadline:
            time.sleep(0.5)
            msgs = read_topic(kafka_bootstrap, config.output.topic)
            late = [
                orjson.loads(m.value())
                for m in msgs
                if m.value() is not None and orjson.loads(m.value())["kind"] == "LATE"
            ]
        assert late, "no LATE result without new input"
        assert late[0]["values"]["clicks"] == 2 and late[0]["window_start"] == base
        assert job.run_totals.ticks > 0  # it was a timer-only pass that sent it
    finally:
        job.stop()


def test_a_timer_pass_that_waited_for_a_long_micro_batch_does_not_run(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The timer thread's pass blocked behind a micro-batch longer than the trigger, then
    ran right after it (the job was not idle: one more Spark job before the next batch),
    and was timed with the batch it had waited for (7-12 s passes in ``batch_seconds``
    that took under one)."""
    topic = unique_name("clicks-busy")
    create_topic(kafka_bootstrap, topic, 1)
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        spark={"trigger": "4s", "max_offsets_per_trigger": None},
    )
    job = StreamingJob(config, bootstrap_servers=kafka_bootstrap, spark=spark)
    reports: list[BatchReport] = []
    job.reports.observers.append(reports.append)
    job.start()

    def passes() -> list[BatchReport]:
        return [r for r in reports if r.batch_id == -1]

    try:
        deadline = time.monotonic() + 60
        while not reports and time.monotonic() < deadline:
            time.sleep(0.2)  # the query's first (empty) micro-batch
        with job._lock:  # a micro-batch of 9 s: the timer thread finds the job idle meanwhile
            time.sleep(9)
            job._last_activity = time.monotonic()  # as the batch does as it ends
            before = len(passes())
        time.sleep(2.5)  # the old code's pass ran at once, and took about a second
        assert len(passes()) == before
        while len(passes()) == before and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(passes()) > before  # the next idle pass, a trigger after the batch
        assert passes()[-1].seconds < 4
    finally:
        job.stop()


@pytest.mark.parametrize("mode", ["micro_batch", "long_running"])
def test_an_available_now_run_sends_its_batched_late_updates_before_it_ends(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    mode: str,
) -> None:
    """``emit.late: 1h`` would hold a LATE update until the next run; a run that
    processes what is there and stops sends it as it ends."""
    topic = unique_name("clicks-backfill")
    create_topic(kafka_bootstrap, topic, 1)
    base = 1_700_000_000_000
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "tumbling", "size": "10s"},
        watermark={"allowed_lateness": "0s"},
        emit={"late": "1h"},
        spark={"mode": mode},
    )
    first = [
        {"page": "/a", "ts": base + 1_000, "latency_ms": 1.0},
        {"page": "/a", "ts": base + 30_000, "latency_ms": 1.0},  # [base, +10 s) fires
    ]
    late = [{"page": "/a", "ts": base + 2_000, "latency_ms": 3.0}]
    watermarks: list[list[int]] = []
    for events in (first, late):
        produce(kafka_bootstrap, topic, events, partitions=1)
        reports: list[BatchReport] = []
        run_to_end(config, kafka_bootstrap, spark, 300, on_report=reports.append)
        watermarks.append([r.clock.watermark for r in reports])
    # the restart reports the clock it goes on from (before, its first timer pass
    # reported "no event yet", and the watermark gauge read 0)
    assert watermarks[1] and NO_WATERMARK not in watermarks[1]
    assert watermarks[1][0] >= watermarks[0][-1] == base + 30_000
    results = json_results(kafka_bootstrap, config.output.topic)
    window = [(r["kind"], r["values"]["clicks"]) for r in results if r["window_start"] == base]
    assert window == [("ON_TIME", 1), ("LATE", 2)]


@pytest.mark.parametrize("mode", ["micro_batch", "long_running"])
def test_a_partition_with_records_waiting_is_not_idle_after_a_stop_longer_than_the_timeout(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    mode: str,
) -> None:
    """A stop longer than ``idle_timeout`` took every partition for idle at the restart
    (their last batch was that long ago): the watermark jumped to the partition furthest
    ahead, and the records waiting in the other were out of retention. The third run
    does the same with records waiting in a partition no run has read yet (it had no
    event time: in micro-batches it did not count)."""
    topic = unique_name("idle-restart")
    create_topic(kafka_bootstrap, topic, 4)
    base = 1_700_000_000_000
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "tumbling", "size": "10s"},
        watermark={"allowed_lateness": "0s", "idle_timeout": "2s"},
        retention={"time": "30s"},
        spark={"mode": mode},
    )

    def event(page: str, ts: int, part: int) -> tuple[bytes, bytes, int]:
        return page.encode(), orjson.dumps({"page": page, "ts": ts, "latency_ms": 1.0}), part

    runs = [
        [event("/a", base + 1_000, 0), event("/b", base + 100_000, 1)]
        + [event("/c", base + 2_000, 2)],  # behind; nothing more comes: it goes idle
        # wait in partition 0 while the job is stopped; the second closes /a's window
        [event("/a", base + 1_500, 0), event("/a", base + 50_000, 0)],
        # partition 3 was empty until now; the second closes /d's window
        [event("/d", base + 60_000, 3), event("/d", base + 75_000, 3)],
    ]
    for i, raw in enumerate(runs):
        if i:
            time.sleep(3)  # stopped for longer than the idle timeout
        produce(kafka_bootstrap, topic, [], raw=raw)
        run_to_end(config, kafka_bootstrap, spark, 300)
    assert read_topic(kafka_bootstrap, config.output.errors_topic) == []
    results = json_results(kafka_bootstrap, config.output.topic)
    first = sorted(
        (r["key"], r["kind"], r["values"]["clicks"]) for r in results if r["window_start"] == base
    )
    # /c's partition had nothing waiting: idle, it held the watermark back no longer
    assert first == [("/a", "ON_TIME", 2), ("/c", "ON_TIME", 1)]
    unread = [(r["key"], r["kind"]) for r in results if r["window_start"] == base + 60_000]
    assert unread == [("/d", "ON_TIME")]


def test_a_partition_a_rate_limited_batch_leaves_for_later_holds_the_watermark_back(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """``max_offsets_per_trigger`` below the partitions with a backlog: each batch reads
    one. A partition not read yet had no event time and did not count, so the first
    batches moved the watermark past the record waiting in it (out of retention)."""
    topic = unique_name("rate-limited")
    create_topic(kafka_bootstrap, topic, 3)
    base = 1_700_000_000_000
    config = job_config(
        tmp_path,
        topic,
        unique_name("job"),
        window={"type": "tumbling", "size": "10s"},
        watermark={"allowed_lateness": "0s"},
        retention={"time": "30s"},
        spark={"max_offsets_per_trigger": 1},
    )
    raw = [
        (page.encode(), orjson.dumps({"page": page, "ts": ts, "latency_ms": 1.0}), part)
        for page, ts, part in [("/a", base + 40_000, 0), ("/b", base + 41_000, 1)]
        + [("/c", base + 1_000, 2), ("/c", base + 60_000, 2)]  # read last: 30 s behind
    ]
    produce(kafka_bootstrap, topic, [], raw=raw)
    reports: list[BatchReport] = []
    run_to_end(config, kafka_bootstrap, spark, 300, on_report=reports.append)
    assert max(len(r.ranges) for r in reports) == 1  # one partition a batch
    assert read_topic(kafka_bootstrap, config.output.errors_topic) == []
    results = json_results(kafka_bootstrap, config.output.topic)
    # the watermark is the slowest partition's (40 s): only /c's first window closed
    fired = [(r["key"], r["window_start"] - base, r["kind"]) for r in results]
    assert fired == [("/c", 0, "ON_TIME")]


def test_a_restart_whose_timer_pass_fails_is_one_line(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A restarted job runs a timer pass before its query starts; when its tasks fail
    there (here: the state directory is a file), the start fails with one line naming
    the task's error. Before, Spark's failure came out whole: a Python traceback through
    the driver, after screenfuls of Java stack."""
    topic = unique_name("clicks")
    create_topic(kafka_bootstrap, topic, 4)  # the stream's records name partitions 0-3
    produce(kafka_bootstrap, topic, make_stream(200).records())
    config = job_config(tmp_path, topic, unique_name("job"))
    run_to_end(config, kafka_bootstrap, spark)
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    from window_operator.errors import TimerPassError
    from window_operator.spark.longrun import job_for

    again = job_for(config, bootstrap_servers=kafka_bootstrap, spark=spark, state_dir=not_a_dir)
    with pytest.raises(TimerPassError) as failed:
        again.start()
    assert "\n" not in str(failed.value)
    assert str(failed.value).startswith("a timer pass failed: NotADirectoryError: ")


def test_a_restart_with_other_aggregations_stops_naming_them(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The aggregations changed between runs (a mean became a sum): the restarted job
    stops before Spark runs anything, in either shape, with one line naming them (the
    driver compares the shape the first run kept in the checkpoint directory). Before,
    the sum went on from the stored mean's columns and its results were wrong; then the
    executors refused it, after four attempts of each task and a minute of tracebacks."""
    topic = unique_name("clicks")
    create_topic(kafka_bootstrap, topic, 4)  # the stream's records name partitions 0-3
    produce(kafka_bootstrap, topic, make_stream(200).records())
    config = job_config(tmp_path, topic, unique_name("job"))
    run_to_end(config, kafka_bootstrap, spark)
    aggregations = [
        {"name": "clicks", "op": "count"},
        {"name": "mean_latency_ms", "op": "sum", "field": "latency_ms"},
    ]
    from window_operator.errors import IncompatibleStateError
    from window_operator.runtime.kept_shape import SHAPE_FILE
    from window_operator.spark.longrun import job_for

    for mode in ("micro_batch", "long_running"):
        changed = job_config(
            tmp_path, topic, config.job, aggregations=aggregations, spark={"mode": mode}
        )
        again = job_for(changed, bootstrap_servers=kafka_bootstrap, spark=spark)
        with pytest.raises(IncompatibleStateError) as refused:
            again.start()
        said = str(refused.value)
        assert "\n" not in said
        assert said.startswith(f"job {config.job!r} keeps its state in another shape")
        assert '["mean","latency_ms",null]' in said and '["sum","latency_ms",null]' in said
    # a job of an earlier version kept no shape (nor does a new checkpoint directory):
    # the last checkpoint in its changelog is compared, before Spark runs anything too
    (Path(str(config.spark.checkpoint_dir)) / SHAPE_FILE).unlink()
    changelog = r"changelog \S+ holds a state of another shape \(aggregations"
    with pytest.raises(IncompatibleStateError, match=changelog):
        run_to_end(
            job_config(tmp_path, topic, config.job, aggregations=aggregations),
            kafka_bootstrap,
            spark,
        )
