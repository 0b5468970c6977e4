"""Helpers for join jobs on Kafka and Spark: inputs with Kafka timestamps, the upsert view of
the output, and a random join of unkeyed inputs with its oracle."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from jobkit import create_topic, read_topic
from joinkit import Ev, nested_loop

from window_operator.config import JoinJobConfig, parse_any_config

BASE = 1_700_000_000_000
Outcome = tuple[str, int | None, int | None]


def produce_at(bootstrap: str, topic: str, rows: list[tuple[bytes, int, int]]) -> None:
    """Produce ``(value, partition, kafka timestamp)`` rows in order, keyed by nothing."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for value, partition, ts in rows:
        while True:
            try:
                p.produce(topic, value=value, partition=partition, timestamp=ts)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def upsert_view(bootstrap: str, topic: str) -> dict[bytes, dict[str, Any]]:
    """The output topic as a consumer of the upsert log sees it (tombstones delete).

    Fails if a result record was sent twice (the same key with a value, more than once).
    """
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


@dataclass
class RandomJoin:
    """A random join of two unkeyed inputs (3 partitions each) and its oracle."""

    config: JoinJobConfig
    events: list[Ev]
    kind: str
    #: per side: its topic and its records as ``(value, partition, kafka timestamp)``
    inputs: tuple[tuple[str, list[tuple[bytes, int, int]]], ...] = ()

    def produce(self, bootstrap: str, part: int = 0, parts: int = 1) -> None:
        """Produce part ``part`` of ``parts`` of each input (the last part ends with one
        far-future sentinel per partition)."""
        for side, (topic, rows) in enumerate(self.inputs):
            piece = rows[len(rows) * part // parts : len(rows) * (part + 1) // parts]
            if part == parts - 1:
                end = {"k": "__end__", "k2": "", "ts": BASE + 10_000_000, "n": -1 - side}
                count = max(3, 1 + max((r[1] for r in rows), default=0))
                piece = piece + [(orjson.dumps(end), p, BASE) for p in range(count)]
            produce_at(bootstrap, topic, piece)

    def expected(self) -> Counter[Outcome]:
        return nested_loop(self.events, ["k"], -5_000, 10_000, self.kind)

    def got(self, bootstrap: str) -> Counter[Outcome]:
        out: Counter[Outcome] = Counter()
        for r in upsert_view(bootstrap, self.config.output.topic).values():
            ln = None if r["left"] is None else r["left"]["n"]
            rn = None if r["right"] is None else r["right"]["n"]
            if not any(n is not None and n < 0 for n in (ln, rn)):  # not the sentinels
                out[(r["kind"], ln, rn)] += 1
        return out


def random_join(
    bootstrap: str,
    tmp: Path,
    names: tuple[str, str, str],
    *,
    kind: str = "inner",
    events: int = 3_000,
    seed: int = 31,
    produce: bool = True,
    partitions: int = 3,
    **sections: Any,
) -> RandomJoin:
    """Produce a random join's inputs (late arrivals included) and build its config.

    ``names``: job, left topic, right topic. ``sections`` override keys of config sections.
    ``produce=False``: the inputs are left to :meth:`RandomJoin.produce`.
    """
    rng = random.Random(seed)
    job, left_t, right_t = names
    for t in (left_t, right_t):
        create_topic(bootstrap, t, partitions)
    evs: list[Ev] = []
    for n in range(events):
        late = rng.random() < 0.05  # some arrive behind the watermark
        ts = BASE + n * 20 - (rng.randrange(1, 30_000) if late else 0)
        evs.append(Ev(rng.randrange(2), rng.randrange(150), "", ts, n))
    rows: dict[int, list[tuple[bytes, int, int]]] = {0: [], 1: []}
    for i, e in enumerate(evs):
        rows[e.side].append((orjson.dumps(e.record), i % partitions, BASE + i))
    data: dict[str, Any] = {
        "job": job,
        "join": {
            "left": {"name": "l", "topic": left_t, "timestamp": "ts"},
            "right": {"name": "r", "topic": right_t, "timestamp": "ts"},
            "on": ["k"],
            "between": ["-5s", "10s"],
            "kind": kind,
        },
        "watermark": {"allowed_lateness": "2s"},
        "retention": {"time": "1h"},
        "state": {"dir": str(tmp / "state"), "tasks": 2},
        "spark": {"trigger": "available_now", "max_offsets_per_trigger": 1_000},
    }
    for name, section in sections.items():  # a section's keys override the defaults'
        data[name] = {**data.get(name, {}), **section}
    config = parse_any_config(data, base_dir=tmp)
    assert isinstance(config, JoinJobConfig)
    join = RandomJoin(config, evs, kind, ((left_t, rows[0]), (right_t, rows[1])))
    if produce:
        join.produce(bootstrap)
    return join
