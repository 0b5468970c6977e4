"""Joins on Spark: both inputs through the keyed exchange, against the join oracles."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from jobkit import create_topic, read_topic, run_to_end
from joinjobkit import BASE, RandomJoin, produce_at, random_join, upsert_view
from joinkit import Ev

from window_operator.config import JoinJobConfig, load_any_config, parse_any_config
from window_operator.join import build_join_runtime
from window_operator.observe.logs import BatchLog
from window_operator.observe.metrics import JobMetrics
from window_operator.simulate import simulate
from window_operator.spark.driver import BatchReport

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]


def seed_config(tmp: Path, name: str, topics: tuple[str, str], **join: Any) -> JoinJobConfig:
    doc = orjson.loads(load_any_config(ROOT / "config/orders-shipments.yaml").model_dump_json())
    data: dict[str, Any] = {
        "job": name,
        "join": {
            **{k: doc["join"][k] for k in ("on", "kind", "store")},
            "left": {**doc["join"]["left"], "topic": topics[0]},
            "right": {**doc["join"]["right"], "topic": topics[1]},
            **join,
        },
        "watermark": {"allowed_lateness": "0s"},
        "retention": {"time": "1h"},
        "state": {"dir": str(tmp / "state")},
        "spark": {"trigger": "available_now", "max_offsets_per_trigger": 2},
    }
    if "rows" in join:
        data["join"].pop("store")
    config = parse_any_config(data, base_dir=tmp)
    assert isinstance(config, JoinJobConfig)
    return config


@pytest.mark.parametrize("condition", [{"range": "2m"}, {"rows": 3}], ids=["range", "rows"])
def test_the_seed_orders_shipments_example_on_spark(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    condition: dict[str, Any],
) -> None:
    orders, ships = unique_name("orders"), unique_name("shipments")
    for t in (orders, ships):
        create_topic(kafka_bootstrap, t, 2)
    lines = (ROOT / "config/samples/orders-shipments.jsonl").read_bytes().splitlines()
    for i, line in enumerate(lines):
        rec = orjson.loads(line)
        source, wall = rec.pop("source"), rec.pop("wall_ms")
        rec.pop("offset")
        # the arrival order of the seed is the Kafka timestamp order (a tie: by line)
        produce_at(kafka_bootstrap, orders if source == "orders" else ships,
                   [(orjson.dumps(rec), i % 2, wall + i)])  # fmt: skip
    config = seed_config(tmp_path, unique_name("job"), (orders, ships), **condition)
    reports: list[BatchReport] = []
    run_to_end(config, kafka_bootstrap, spark, on_report=reports.append)
    # the state gauge: every message is still held (nothing is an hour old), across tasks
    latest = {t.task: t.held_messages for r in reports for t in r.tasks if t.held_messages}
    held = {name: sum(h[name] for h in latest.values()) for name in ("orders", "shipments")}
    assert held == {"orders": 3, "shipments": 4}
    got = sorted(
        orjson.dumps(r) for r in upsert_view(kafka_bootstrap, config.output.topic).values()
    )
    # the same job in simulate, over the seed's lines in their arrival order
    out = (tmp_path / "expected.jsonl").open("wb")
    sample = tmp_path / "sample.jsonl"
    sample.write_bytes(b"\n".join(lines) + b"\n")
    simulate(build_join_runtime(config), sample, out, batch_size=1)
    out.close()
    expected = sorted((tmp_path / "expected.jsonl").read_bytes().splitlines())
    assert got == expected and got


@pytest.mark.parametrize("kind", ["inner", "left", "full"])
def test_a_random_join_of_unkeyed_inputs_matches_the_oracle(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    kind: str,
) -> None:
    names = (unique_name("job"), unique_name("left"), unique_name("right"))
    join = random_join(kafka_bootstrap, tmp_path, names, kind=kind)
    run_to_end(join.config, kafka_bootstrap, spark)
    assert join.got(kafka_bootstrap) == join.expected()


def test_restore_and_inspect_a_join(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    orders, ships = unique_name("orders"), unique_name("shipments")
    for t in (orders, ships):
        create_topic(kafka_bootstrap, t, 2)
    for i, line in enumerate(
        (ROOT / "config/samples/orders-shipments.jsonl").read_bytes().splitlines()
    ):
        rec = orjson.loads(line)
        source, wall = rec.pop("source"), rec.pop("wall_ms")
        rec.pop("offset")
        produce_at(kafka_bootstrap, orders if source == "orders" else ships,
                   [(orjson.dumps(rec), i % 2, wall + i)])  # fmt: skip
    config = seed_config(tmp_path, unique_name("job"), (orders, ships), range="2m")
    run_to_end(config, kafka_bootstrap, spark)
    data = orjson.loads(config.model_dump_json())
    data["state"]["dir"] = str(tmp_path / "restored")  # an empty state dir: rebuilt from Kafka
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    base = [sys.executable, "-m", "window_operator"]
    servers = ["--config", str(path), "--bootstrap-servers", kafka_bootstrap]
    restore = subprocess.run([*base, "restore", *servers], capture_output=True, text=True)
    assert restore.returncode == 0, restore.stderr
    inspect = subprocess.run(
        [*base, "inspect", "--config", str(path), "--key", "1"], capture_output=True, text=True
    )
    assert inspect.returncode == 0, inspect.stderr
    messages = [orjson.loads(x) for x in inspect.stdout.splitlines()]
    # order 1 and shipments 1001, 1002 of id 1: both inputs' messages of the key
    assert sorted(
        (m["source"], m["record"].get("value", m["record"].get("cost"))) for m in messages
    ) == [
        ("orders", 0),
        ("shipments", 2),
        ("shipments", 3),
    ]


@pytest.mark.parametrize(
    ("mode", "partitions"), [("micro_batch", 3), ("long_running", 3), ("long_running", 4)]
)
def test_a_self_join_reads_its_one_topic_as_both_inputs(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    mode: str,
    partitions: int,
) -> None:
    """Both inputs read one topic. In micro-batches every record reached only the left
    input (the first that reads the topic): an inner join found no pair at all. With 4
    partitions on 2 long-running workers, a worker held partition 0 of both inputs and
    assigned it twice to its consumer: librdkafka refused, and the workers failed at
    every start."""
    topic = unique_name("events")
    names = (unique_name("job"), topic, topic)
    one = random_join(kafka_bootstrap, tmp_path, names, events=300, produce=False,
                      partitions=partitions, spark={"mode": mode})  # fmt: skip
    rows = sorted((row for _, side in one.inputs for row in side), key=lambda r: r[2])
    both = [Ev(side, e.k, e.k2, e.ts, e.n) for e in one.events for side in (0, 1)]
    join = RandomJoin(one.config, both, "inner", ((topic, rows),))
    join.produce(kafka_bootstrap)
    run_to_end(join.config, kafka_bootstrap, spark)
    expected = join.expected()
    assert expected[("MATCH", 0, 0)] == 1  # each record pairs with itself, at least
    assert join.got(kafka_bootstrap) == expected


def test_produce_loads_a_join_file_that_the_job_reads_as_simulate_does(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """``produce`` routes each line to the input its ``source`` names, without the
    meta fields; a line naming no input is skipped and counted."""
    orders, ships = unique_name("orders"), unique_name("shipments")
    config = seed_config(tmp_path, unique_name("job"), (orders, ships), range="2m")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(orjson.loads(config.model_dump_json())))
    sample = (ROOT / "config/samples/orders-shipments.jsonl").read_bytes()
    events = tmp_path / "events.jsonl"
    events.write_bytes(sample + b'{"source": "returns", "id": 1}\n{broken\n\n')
    proc = subprocess.run(
        [sys.executable, "-m", "window_operator", "produce", "--config", str(path),
         "--input", str(events), "--partitions", "2", "--bootstrap-servers", kafka_bootstrap],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"produced 7 records (3 to {orders}, 4 to {ships}); "
        "1 line was not JSON (a join's line names its input): skipped; "
        "1 line named no input of the join in 'source': skipped"
    )
    # keyed by the join key, the records as simulate hands them to the join
    written = read_topic(kafka_bootstrap, orders)
    assert sorted((m.key(), orjson.loads(m.value())) for m in written) == [
        (b"1", {"id": 1, "value": 0, "time": "2024-01-01T08:59:10Z"}),
        (b"3", {"id": 3, "value": 5, "time": "2024-01-01T09:00:00Z"}),
        (b"9", {"id": 9, "value": 9, "time": "2024-01-01T08:59:30Z"}),
    ]
    run_to_end(config, kafka_bootstrap, spark)
    got = sorted(
        orjson.dumps(r) for r in upsert_view(kafka_bootstrap, config.output.topic).values()
    )
    expected = tmp_path / "expected.jsonl"
    with expected.open("wb") as out:
        simulate(build_join_runtime(config), events, out, batch_size=1)
    assert got == sorted(expected.read_bytes().splitlines()) and len(got) == 4


def test_bad_input_on_both_join_sides_is_reported_with_its_side(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    left_t, right_t = unique_name("left"), unique_name("right")
    for t in (left_t, right_t):
        create_topic(kafka_bootstrap, t, 1)
    good_l = [orjson.dumps({"k": k, "ts": BASE + k, "n": k}) for k in range(5)]
    good_r = [orjson.dumps({"k": k, "ts": BASE + k + 100, "n": 100 + k}) for k in range(5)]
    produce_at(
        kafka_bootstrap, left_t, [(v, 0, BASE) for v in [*good_l[:2], b"{broken", *good_l[2:]]]
    )
    produce_at(
        kafka_bootstrap,
        right_t,
        [(v, 0, BASE) for v in [good_r[0], b'{"k": 1, "n": 7}', *good_r[1:]]],
    )
    data: dict[str, Any] = {
        "job": unique_name("job"),
        "join": {
            "left": {"name": "l", "topic": left_t, "timestamp": "ts"},
            "right": {"name": "r", "topic": right_t, "timestamp": "ts"},
            "on": ["k"],
            "range": "1s",
        },
        "state": {"dir": str(tmp_path / "state")},
        "spark": {"trigger": "available_now"},
    }
    config = parse_any_config(data, base_dir=tmp_path)
    assert isinstance(config, JoinJobConfig)
    run_to_end(config, kafka_bootstrap, spark)
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    got = sorted(
        (h["source.input"], h["error.code"], h["source.offset"])
        for h in ({k: v.decode() for k, v in m.headers()} for m in errors)
    )
    assert got == [("l", "BAD_JSON", "2"), ("r", "MISSING_TIMESTAMP", "1")]
    pairs = upsert_view(kafka_bootstrap, config.output.topic).values()
    assert sorted((r["left"]["n"], r["right"]["n"]) for r in pairs) == [
        (k, 100 + k) for k in range(5)
    ]


def test_a_long_running_self_join_counts_each_record_read_once(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
) -> None:
    """README (--report): a self-join's partition "is listed for each input, and was
    read once"; the log line's ``read``, records_read_total and the run's totals count
    it once. Epochs of 40 records cut the two inputs' ranges of a partition apart, and
    with 3 partitions on 2 workers one partition's two inputs are on two workers."""
    topic = unique_name("events")
    names = (unique_name("job"), topic, topic)
    one = random_join(kafka_bootstrap, tmp_path, names, events=600, produce=False,
                      partitions=3,
                      spark={"mode": "long_running", "max_offsets_per_trigger": 40})  # fmt: skip
    rows = sorted((row for _, side in one.inputs for row in side), key=lambda r: r[2])
    both = [Ev(side, e.k, e.k2, e.ts, e.n) for e in one.events for side in (0, 1)]
    join = RandomJoin(one.config, both, "inner", ((topic, rows),))
    join.produce(kafka_bootstrap)
    reports: list[Any] = []
    job = run_to_end(join.config, kafka_bootstrap, spark, on_report=reports.append)
    in_topic = len(read_topic(kafka_bootstrap, topic))
    metrics = JobMetrics(join.config)
    log = BatchLog(metrics)
    counted = 0
    for r in reports:
        metrics(r)
        line = log.line(r)
        if r.batch_id >= 0:
            counted += int(line.split(", ")[1].removesuffix(" read"))
    assert metrics.summary().read == in_topic
    assert job.reports.totals.totals["records"] == in_topic
    per_input = {s: sum(m.records for r in reports for m in r.ranges if m.range.source == s)
                 for s in (0, 1)}  # fmt: skip
    assert per_input == {0: in_topic, 1: in_topic}
    assert counted == in_topic
