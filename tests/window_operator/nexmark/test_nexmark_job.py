"""A Nexmark query end to end: `nexmark generate` fills the topics, the job of
config/nexmark/q7.yaml runs on Spark through the keyed exchange, against the reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from jobkit import read_topic, run_to_end

from window_operator.cli import main
from window_operator.config import parse_config
from window_operator.nexmark import NexmarkConfig, generate
from window_operator.nexmark.reference import final_watermark, q7_highest_bid
from window_operator.nexmark.topics import partitions_of
from window_operator.spark.driver import BatchReport

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config" / "nexmark"
BASE = 1_700_000_000_000
EVENTS = 4_000
RATE = 100.0  # events per second of event time: 4,000 events span 40 s, four windows
PARTITIONS = 2
LATENESS = 4_000  # the watermark of q7.yaml


def test_q7_highest_bid_on_kafka_and_spark_matches_the_reference(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("nexmark") + "-"
    argv = ["nexmark", "generate", "--events", str(EVENTS), "--rate", str(RATE),
            "--bootstrap-servers", kafka_bootstrap, "--topic-prefix", prefix,
            "--partitions", str(PARTITIONS), "--base-time", str(BASE), "--seed", "3"]  # fmt: skip
    assert main(argv) == 0

    doc = yaml.safe_load((CONFIG_DIR / "q7.yaml").read_text())
    assert doc["input"]["topic"] == "nexmark-bids"
    doc |= {
        "job": unique_name("q7"),
        "output": {"topic": unique_name("q7-out")},
        "state": {"dir": str(tmp_path / "state")},
        "spark": {"trigger": "available_now", "max_offsets_per_trigger": 2_000},
    }
    doc["input"]["topic"] = f"{prefix}bids"
    config = parse_config(doc, base_dir=CONFIG_DIR)
    reports: list[BatchReport] = []
    run_to_end(config, kafka_bootstrap, spark, 300, on_report=reports.append)
    assert len(reports) >= 2  # more than one micro-batch

    cfg = NexmarkConfig(rate=RATE, base_time=BASE, seed=3)
    events = generate(cfg, EVENTS)
    bid_partition = partitions_of(cfg, events, PARTITIONS)[2]
    watermark = final_watermark(events.bids.date_time, bid_partition, PARTITIONS, LATENESS)
    assert reports[-1].clock.watermark == watermark
    want = q7_highest_bid(events.bids, watermark=watermark)
    assert len(want) == 3  # [0, 10), [10, 20), [20, 30) s; [30, 40) is still open

    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    assert {r["kind"] for r in results} == {"ON_TIME"}
    assert {r["window_start"]: r["values"]["maxprice"] for r in results} == want
    assert len(results) == len(want)
