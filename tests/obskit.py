"""Helpers of the observability tests: a small job with known outcomes, scraping metrics."""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import yaml
from jobkit import create_topic
from prometheus_client.parser import text_string_to_metric_families

from window_operator.config import JobConfig, parse_config

#: An event time aligned to a minute: windows start at known places.
T0 = 1_700_000_040_000
KEYS = [f"/page/{i}" for i in range(8)]


def job_dict(tmp: Path, topic: str, job: str, **spark: Any) -> dict[str, Any]:
    return {
        "job": job,
        "input": {"topic": topic, "key": "page", "timestamp": "ts"},
        "window": {"type": "hopping", "size": "60s", "step": "10s"},
        "aggregations": [{"name": "clicks", "op": "count"}],
        "watermark": {"allowed_lateness": "5s"},
        "emit": {"late": "per_arrival"},
        "retention": {"time": "1m"},
        "state": {"dir": str(tmp / "state")},
        "spark": {"trigger": "available_now", **spark},
    }


def write_job(tmp: Path, doc: dict[str, Any], name: str = "job.yaml") -> tuple[Path, JobConfig]:
    path = tmp / name
    path.write_text(yaml.safe_dump(doc))
    return path, parse_config(doc, base_dir=tmp)


def in_order(n: int) -> list[dict[str, Any]]:
    """``n`` events, 250 ms apart from T0, over :data:`KEYS`."""
    return [{"page": KEYS[i % len(KEYS)], "ts": T0 + 250 * i} for i in range(n)]


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0


def produce_events(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> None:
    produce_values(bootstrap, topic, [orjson.dumps(e) for e in events])


def one_partition_topic(bootstrap: str, topic: str) -> None:
    """One partition: the watermark is that partition's, nothing waits for idle ones."""
    create_topic(bootstrap, topic, 1)


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(port: int) -> Samples:
    """Every sample of ``/metrics``: name -> labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name][tuple(sorted(s.labels.items()))] = s.value
    return out


def total(samples: Samples, name: str) -> float:
    return sum(samples.get(name, {}).values())


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for labels, value in samples.get(name, {}).items():
        out[dict(labels)[label]] += value
    return dict(out)
