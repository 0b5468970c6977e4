"""Nexmark Q8 as its three shipped jobs, offline: the persons who opened an auction in
the tumbling window they joined in, once each, also when an auction comes late."""

from __future__ import annotations

import io
from pathlib import Path

import orjson

from window_operator.config import load_any_config
from window_operator.job import build_runtime
from window_operator.join import build_join_runtime
from window_operator.simulate import simulate

NEXMARK = Path(__file__).resolve().parents[3] / "config" / "nexmark"
T = 1_704_067_200_000  # a window start


def _stage(name: str, lines: list[dict[str, int | str]], tmp: Path, batch: int) -> list[bytes]:
    config = load_any_config(NEXMARK / f"{name}.yaml")
    path = tmp / f"{name}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    out = io.BytesIO()
    runtime = build_join_runtime(config) if name == "q8" else build_runtime(config)  # type: ignore[arg-type]
    simulate(runtime, path, out, batch_size=batch)
    return out.getvalue().splitlines()


def test_a_late_auction_does_not_answer_a_person_twice(tmp_path: Path) -> None:
    """A user walkthrough: auction 3 of seller 1 came after the window had fired; its
    LATE update of the grouped auctions paired person 1 a second time, with a Kafka key
    of its own, so compaction kept both. Stage 1 sends each window once now."""
    persons = [{"id": 1, "name": "Ann", "dateTime": T + 1_000}]
    auctions = [
        {"id": 1, "seller": 1, "dateTime": T + 2_000},
        {"id": 2, "seller": 9, "dateTime": T + 30_000},  # the window of T fires
        {"id": 3, "seller": 1, "dateTime": T + 3_000},  # late for it
    ]
    grouped = [
        orjson.loads(r) | {"source": "persons"} for r in _stage("q8-persons", persons, tmp_path, 10)
    ] + [
        orjson.loads(r) | {"source": "auctions"}
        for r in _stage("q8-auctions", auctions, tmp_path, 2)
    ]
    answer = [orjson.loads(r) for r in _stage("q8", grouped, tmp_path, 10)]
    assert [(r["kind"], r["key"]) for r in answer] == [("MATCH", {"key": "1", "window_start": T})]
