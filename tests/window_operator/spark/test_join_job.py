"""Joins on Spark: both inputs through the keyed exchange, against the join oracles."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from confluent_kafka import Producer
from jobkit import create_topic, read_topic
from joinkit import Ev, nested_loop

from window_operator.config import JoinJobConfig, load_any_config, parse_any_config
from window_operator.join import build_join_runtime
from window_operator.simulate import simulate
from window_operator.spark.driver import StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
BASE = 1_700_000_000_000


def produce_at(bootstrap: str, topic: str, rows: list[tuple[bytes, int, int]]) -> None:
    """Produce ``(value, partition, kafka timestamp)`` rows in order, keyed by nothing."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for value, partition, ts in rows:
        p.produce(topic, value=value, partition=partition, timestamp=ts)
    assert p.flush(60) == 0


def run(spark: Any, config: JoinJobConfig, bootstrap: str) -> StreamingJob:
    job = StreamingJob(config, bootstrap_servers=bootstrap, spark=spark)
    job.start()
    assert job.await_termination(600), "the AvailableNow query did not finish"
    assert job.query.exception() is None
    return job


def upsert_view(bootstrap: str, topic: str) -> dict[bytes, dict[str, Any]]:
    """The output topic as a consumer of the upsert log sees it (tombstones delete)."""
    table: dict[bytes, dict[str, Any]] = {}
    seen: Counter[bytes] = Counter()
    for m in read_topic(bootstrap, topic):
        if m.value() is None:
            table.pop(m.key(), None)
        else:
            seen[m.key()] += 1
            table[m.key()] = orjson.loads(m.value())
    assert max(seen.values(), default=1) == 1, "a result was sent twice"
    return table


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
    run(spark, config, kafka_bootstrap)
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
    rng = random.Random(31)
    left_t, right_t = unique_name("left"), unique_name("right")
    for t in (left_t, right_t):
        create_topic(kafka_bootstrap, t, 3)
    evs: list[Ev] = []
    for n in range(3_000):
        side = rng.randrange(2)
        late = rng.random() < 0.05  # some arrive behind the watermark
        ts = BASE + n * 20 - (rng.randrange(1, 30_000) if late else 0)
        evs.append(Ev(side, rng.randrange(150), "", ts, n))
    rows: dict[int, list[tuple[bytes, int, int]]] = {0: [], 1: []}
    for i, e in enumerate(evs):
        rows[e.side].append((orjson.dumps(e.record), i % 3, BASE + i))
    for side, topic in ((0, left_t), (1, right_t)):
        end = {"k": "__end__", "k2": "", "ts": BASE + 10_000_000, "n": -1 - side}
        sentinel = [(orjson.dumps(end), p, BASE) for p in range(3)]
        produce_at(kafka_bootstrap, topic, rows[side] + sentinel)
    data: dict[str, Any] = {
        "job": unique_name("job"),
        "join": {
            "left": {"name": "l", "topic": left_t, "timestamp": "ts"},
            "right": {"name": "r", "topic": right_t, "timestamp": "ts"},
            "on": ["k"],
            "between": ["-5s", "10s"],
            "kind": kind,
        },
        "watermark": {"allowed_lateness": "2s"},
        "retention": {"time": "1h"},
        "state": {"dir": str(tmp_path / "state"), "tasks": 2},
        "spark": {"trigger": "available_now", "max_offsets_per_trigger": 1_000},
    }
    config = parse_any_config(data, base_dir=tmp_path)
    assert isinstance(config, JoinJobConfig)
    run(spark, config, kafka_bootstrap)
    got: Counter[tuple[str, int | None, int | None]] = Counter()
    for r in upsert_view(kafka_bootstrap, config.output.topic).values():
        ln = None if r["left"] is None else r["left"]["n"]
        rn = None if r["right"] is None else r["right"]["n"]
        if -1 not in (ln, rn) and -2 not in (ln, rn):
            got[(r["kind"], ln, rn)] += 1
    assert got == nested_loop(evs, ["k"], -5_000, 10_000, kind)


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
    run(spark, config, kafka_bootstrap)
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
    run(spark, config, kafka_bootstrap)
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
