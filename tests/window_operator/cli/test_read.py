"""``window-operator read``: a job's results and error records from Kafka, as lines."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import yaml
from codeckit import avro_body
from jobkit import create_topic, input_records, join_batch_job, produce, read_topic

from window_operator.broker import free_port
from window_operator.codecs import result_decoder_for
from window_operator.config import JobConfig, load_config
from window_operator.runtime.batch import LocalJob
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.settings import TaskSettings
from window_operator.spark.topics import prepare_topics

pytestmark = pytest.mark.kafka
S = 1000


def read(config: Path, bootstrap: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "window_operator", "read", "--config", str(config),
         "--bootstrap-servers", bootstrap, *args],
        capture_output=True, timeout=120,
    )  # fmt: skip


def ran_job(tmp: Path, bootstrap: str, name: Callable[[str], str], output: str) -> JobConfig:
    """A tumbling 10 s count over 5 records, two of them bad, run without Spark."""
    topic = name("in")
    create_topic(bootstrap, topic, 1)
    doc = {
        "job": name("job"),
        "input": {"topic": topic, "key": "k", "timestamp": "ts"},
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": [{"name": "n", "op": "count"}],
        "output": {"format": output},
        "state": {"dir": str(tmp / "state")},
    }
    (tmp / "job.yaml").write_text(yaml.safe_dump(doc))
    config = load_config(tmp / "job.yaml")
    values = [b'{"k":"a","ts":1000}', b"{broken", b'{"k":"a","ts":2000}', b'{"k":"b"}',
              b'{"k":"a","ts":25000}']  # fmt: skip
    job = LocalJob(TaskSettings(config, bootstrap, str(tmp), prepare_topics(config, bootstrap)))
    stamps = [7_000, 7_001, 7_002, -1, 7_004]  # the fourth record has no Kafka timestamp
    job.run_batch([InputRecords(topic, 0, list(range(5)), [b"a"] * 5, values, stamps)], 1_000)
    return config


@pytest.mark.parametrize("output", ["json", "avro"])
def test_read_prints_the_results_and_the_error_records_the_job_sent(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], output: str
) -> None:
    config = ran_job(tmp_path, kafka_bootstrap, unique_name, output)
    decoder = result_decoder_for(config)
    sent = [decoder.decode(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    proc = read(tmp_path / "job.yaml", kafka_bootstrap)
    assert proc.returncode == 0, proc.stderr
    got = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert got == sent and [(r["key"], r["values"]["n"]) for r in got] == [("a", 2)]
    assert f"read: 1 results from {config.output.topic}" in proc.stderr.decode()

    proc = read(tmp_path / "job.yaml", kafka_bootstrap, "--errors")
    assert proc.returncode == 0, proc.stderr
    errors = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert [(e["code"], e["topic"], e["partition"], e["offset"], e["raw"]) for e in errors] == [
        ("BAD_JSON", config.input.topic, 0, 1, "{broken"),
        ("MISSING_TIMESTAMP", config.input.topic, 0, 3, '{"k":"b"}'),
    ]  # as simulate --errors writes them
    assert all(e["reason"] for e in errors)
    assert [(e["kafka_key"], e["kafka_key_base64"]) for e in errors] == [("a", "YQ==")] * 2
    assert [e["wall_ms"] for e in errors] == [7_001, None]  # the records' Kafka timestamps


def test_a_retraction_reads_as_its_window_and_follow_ends_with_ctrl_c(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A RETRACT is a tombstone on Kafka (a session merged away): it was left out, as if
    the session it retracts still stood. ``--follow`` prints as records come, and Ctrl-C
    (or SIGTERM) ends it with the closing line and exit status 0."""
    config = ran_job(tmp_path, kafka_bootstrap, unique_name, "json")
    window = b'{"key":"a","window_start":0,"window_end":10000}'
    produce(kafka_bootstrap, config.output.topic, [], raw=[(window, None, 0)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "read", "--config", str(tmp_path / "job.yaml"),
         "--bootstrap-servers", kafka_bootstrap, "--follow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # started with Ctrl-C ignored, as a shell starts a background job (and as a CI
        # run of the suite did): Python then raises no KeyboardInterrupt, and the read
        # went on until it was killed
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a read that did not stop must not outlive the test
    assert proc.returncode == 0, err
    assert orjson.loads(lines[1]) == {
        "key": "a", "window_start": 0, "window_end": 10_000, "kind": "RETRACT"
    }  # fmt: skip
    assert orjson.loads(lines[0])["kind"] == "ON_TIME"
    assert f"read: 2 results from {config.output.topic}" in err.decode()


def test_follow_ends_when_its_broker_is_gone(tmp_path: Path) -> None:
    """A broker that goes away shows as client errors only (librdkafka retries for
    ever): ``read --follow`` went on for ever, silent. Now it stops after
    ``--broker-timeout`` seconds of nothing but errors, exit status 1."""
    broker = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "broker", "--port", str(free_port()),
         "--data-dir", str(tmp_path / "broker")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    read_proc = None
    try:
        assert broker.stdout is not None
        bootstrap = broker.stdout.readline().strip().split("=", 1)[1]
        config = ran_job(tmp_path, bootstrap, lambda name: name, "json")
        job = str(tmp_path / "job.yaml")
        read_proc = subprocess.Popen(
            [sys.executable, "-m", "window_operator", "read", "--config", job,
             "--bootstrap-servers", bootstrap, "--follow", "--broker-timeout", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert read_proc.stdout is not None
        assert orjson.loads(read_proc.stdout.readline())["kind"] == "ON_TIME"
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=30) == 0
        _, err = read_proc.communicate(timeout=120)
        assert read_proc.returncode == 1, err
        assert f"reading {config.output.topic}: nothing from the broker for 3 s" in err.decode()
        assert b"Traceback" not in err
    finally:
        for proc in (read_proc, broker):
            if proc is not None:
                proc.kill()


def test_read_of_a_job_that_never_ran_says_so(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        f"job: {unique_name('job')}\ninput: {{topic: in, key: k, timestamp: ts}}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
    )
    proc = read(job, kafka_bootstrap)
    assert proc.returncode == 2, proc.stderr
    assert b"does not exist on" in proc.stderr and b"Traceback" not in proc.stderr


def test_a_join_retraction_reads_as_the_unmatched_row_it_withdraws(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A join's RETRACT is a tombstone on the key of the unmatched row it withdraws
    (the row's input positions): ``read`` printed that key (``{"left": [0, 0], "right":
    null, "kind": "RETRACT"}``), which names neither the row nor its join key (a
    walkthrough). It prints the row again with ``"kind": "RETRACT"``, the line
    ``simulate`` writes for it."""
    join = {"kind": "left", "between": ["-3s", "4s"]}
    orders, shipments, job = join_batch_job(kafka_bootstrap, unique_name, tmp_path, join)
    events = {  # per batch: the orders and the shipments
        1_000: ([{"k": 1, "ts": 100 * S}], [{"k": 9, "ts": 200 * S}]),
        2_000: ([{"k": 5, "ts": 300 * S}], [{"k": 9, "ts": 300 * S}]),  # order 1: unmatched
        3_000: ([], [{"k": 1, "ts": 101 * S}]),  # late, and its partner: RETRACT, MATCH
    }
    first = {orders: 0, shipments: 0}
    for now, (left, right) in events.items():
        batch = []
        for topic, evs in ((orders, left), (shipments, right)):
            if evs:
                batch.append(input_records(topic, first[topic], evs))
                first[topic] += len(evs)
        job.run_batch(batch, now)
    proc = read(tmp_path / "job.yaml", kafka_bootstrap)
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.splitlines()
    assert [orjson.loads(x)["kind"] for x in got] == ["LEFT_UNMATCHED", "RETRACT", "MATCH"]
    assert got[1] == got[0].replace(b'"LEFT_UNMATCHED"', b'"RETRACT"')
    assert orjson.loads(got[1])["key"] == {"k": 1}


def test_unmatched_rows_are_kept_until_the_job_can_no_longer_withdraw_them() -> None:
    """``read`` keeps each unmatched join row until the watermark of its output
    partition, bounded from below by the rows read since, has passed its last partner's
    time by more than two retentions (one for the job's storing it, one for a batch's
    rows read before a retraction the same batch wrote), and at most a set number: a
    ``read --follow`` of a join kept every unmatched row it ever read (reviews)."""
    from window_operator.cli.read import _UnmatchedRows

    def row(kind: str, left_ts: int | None, right_ts: int | None) -> bytes:
        return orjson.dumps(
            {"kind": kind, "key": {"k": 1}, "left": None, "right": None,
             "left_ts": left_ts, "right_ts": right_ts}
        )  # fmt: skip

    kept = _UnmatchedRows(lo=-3_000, hi=4_000, retention=10_000)
    kept.remember(0, b"L0", row("LEFT_UNMATCHED", 0, None))  # last partner 4 s: ends 14 s
    kept.remember(0, b"R0", row("RIGHT_UNMATCHED", None, 5_000))  # 8 s: ends 18 s
    kept.remember(0, b"L1", row("LEFT_UNMATCHED", 10_000, None))  # the bound: 14 s
    # another output partition read ahead does not move partition 0's bound
    kept.remember(1, b"P0", row("LEFT_UNMATCHED", 500_000, None))
    assert set(kept.rows) == {b"L0", b"R0", b"L1", b"P0"}
    kept.remember(0, b"L2", row("LEFT_UNMATCHED", 21_000, None))  # 25 s: past 14 s + 10 s
    assert set(kept.rows) == {b"R0", b"L1", b"L2", b"P0"}
    withdrawn = kept.withdrawn(b"R0")
    assert withdrawn == row("RIGHT_UNMATCHED", None, 5_000).replace(b"RIGHT_UNMATCHED", b"RETRACT")
    assert kept.withdrawn(b"R0") is None and kept.withdrawn(b"L0") is None
    kept.remember(0, b"L3", row("LEFT_UNMATCHED", 100_000, None))  # every earlier one ended
    assert set(kept.rows) == {b"L3", b"P0"} and len(kept.ends[0]) == 1
    # at most `most` rows: the oldest go first
    few = _UnmatchedRows(lo=0, hi=0, retention=10**9, most=2)
    for i in range(3):
        few.remember(0, b"K%d" % i, row("LEFT_UNMATCHED", i, None))
    assert list(few.rows) == [b"K1", b"K2"]


def test_results_of_another_output_format_are_counted_with_the_likely_cause(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """(The closing line said ``, 1 records that are not``: an output switched from JSON
    to Avro between runs keeps the JSON results in the topic beside the Avro ones.)"""
    config = ran_job(tmp_path, kafka_bootstrap, unique_name, "avro")
    key = b'{"key":"x","window_start":0,"window_end":10000}'
    value = b'{"key":"x","window_start":0,"window_end":10000,"kind":"ON_TIME"}'
    produce(kafka_bootstrap, config.output.topic, [], raw=[(key, value, None)])
    proc = read(tmp_path / "job.yaml", kafka_bootstrap)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1
    assert (
        f"read: 1 results from {config.output.topic}, 1 records skipped that do not decode "
        "as results (written in another format than output.format avro?)"
    ) in proc.stderr.decode()


def test_an_avro_inputs_error_records_read_with_the_record_they_decoded_to(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """An Avro record the job rejected (a null key or event time) is binary: ``read
    --errors`` adds the record it decoded to; a value that does not decode has none."""
    schema = {
        "type": "record",
        "name": "E",
        "fields": [
            {"name": "k", "type": ["null", "string"]},
            {"name": "ts", "type": ["null", "long"]},
        ],
    }
    (tmp_path / "e.avsc").write_bytes(orjson.dumps(schema))

    def avro(record: dict[str, object]) -> bytes:
        return avro_body(schema, record)

    topic = unique_name("in")
    create_topic(kafka_bootstrap, topic, 1)
    doc = {
        "job": unique_name("job"),
        "input": {"topic": topic, "key": "k", "timestamp": "ts", "format": "avro",
                  "avro_schema": "e.avsc"},
        "window": {"type": "tumbling", "size": "10s"},
        "aggregations": [{"name": "n", "op": "count"}],
        "state": {"dir": str(tmp_path / "state")},
    }  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(doc))
    config = load_config(tmp_path / "job.yaml")
    good = avro({"k": "a", "ts": 1000})
    values = [good, avro({"k": None, "ts": 2000}), avro({"k": "a", "ts": None}), good[:-1]]
    job = LocalJob(
        TaskSettings(
            config, kafka_bootstrap, str(tmp_path), prepare_topics(config, kafka_bootstrap)
        )
    )
    job.run_batch([InputRecords(topic, 0, list(range(4)), [b"a"] * 4, values, [7_000] * 4)], 1_000)

    proc = read(tmp_path / "job.yaml", kafka_bootstrap, "--errors")
    assert proc.returncode == 0, proc.stderr
    errors = [orjson.loads(line) for line in proc.stdout.splitlines()]
    assert [(e["code"], e["offset"], e.get("record")) for e in errors] == [
        ("MISSING_KEY", 1, {"k": None, "ts": 2000}),
        ("BAD_TIMESTAMP", 2, {"k": "a", "ts": None}),  # the Avro field is there: null
        ("BAD_AVRO", 3, None),
    ]
    assert "record" not in errors[2]
