"""A job restarted in the other shape (``spark.mode``) continues where its state ends.

Micro-batches keep their progress in Spark's checkpoint, long-running workers in the
state, so a switch meets the other shape's progress behind (or missing): whatever it
reads again must be recognised as replays, and nothing may be skipped. Real broker,
real RocksDB, Spark ``local[2]``; the input is unkeyed, so every window goes through
the exchange.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from jobkit import (
    assert_matches_oracle,
    create_topic,
    job_config,
    latest_results,
    make_stream,
    oracle,
    produce,
    read_topic,
    run_to_end,
    sentinels,
)
from joinjobkit import random_join

from window_operator.observe.status import job_status

# jobs in their own processes, each its own Spark: one at a time, beside the lighter tests
# (bash .ci/run runs two pytest workers with --dist loadgroup)
pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.xdist_group("spark-jobs")]

PARTITIONS = 4


@pytest.mark.parametrize(
    "modes",
    [
        ("micro_batch", "long_running", "micro_batch"),
        ("long_running", "micro_batch", "long_running"),
    ],
    ids=["micro-long-micro", "long-micro-long"],
)
def test_a_job_restarted_in_the_other_shape_counts_every_event_once(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    modes: tuple[str, str, str],
) -> None:
    topic = unique_name("clicks")
    stream = make_stream(6_000, keys=80, seed=53)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"max_offsets_per_trigger": 1_000}
    )
    parts = [records[:2_000], records[2_000:4_000], records[4_000:]]
    applied = 0
    for i, (mode, part) in enumerate(zip(modes, parts, strict=True)):
        produce(kafka_bootstrap, topic, part, round_robin=True, partitions=PARTITIONS)
        if i == len(parts) - 1:
            ends = sentinels(int(stream.ts.max()), PARTITIONS)
            produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
        run = config.model_copy(update={"spark": config.spark.model_copy(update={"mode": mode})})
        job = run_to_end(run, kafka_bootstrap, spark)
        applied += job.run_totals.totals.get("applied", 0)
        # micro-batches restart from Spark's checkpoint (or the earliest offsets without
        # one), which is a part behind after a long-running run: that part is replayed
        behind = i > 0 and mode == "micro_batch" and modes[i - 1] == "long_running"
        assert job.run_totals.totals.get("replayed", 0) == (2_000 if behind else 0)
        assert job.run_totals.totals.get("rejected", 0) == 0, job.run_totals.totals
        # `status` reads the progress of the shape that ran last
        status = job_status(run, kafka_bootstrap)
        assert status.healthy and status.lag == 0, (mode, status.problems)
        assert status.checkpoint.unit == ("epoch" if mode == "long_running" else "batch")
        assert all(p.max_event_time is not None for p in status.partitions), status.partitions
    assert applied == len(records) + PARTITIONS, "every event applied once over the 3 runs"
    messages = read_topic(kafka_bootstrap, config.output.topic)
    got = latest_results(config, messages)
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
    results = [orjson.loads(m.value()) for m in messages if m.value() is not None]
    sent = Counter((r["key"], r["window_start"], r["update_seq"]) for r in results)
    doubled = [kw for kw, n in sent.items() if n > 1]
    assert not doubled, f"{len(doubled)} results sent twice, e.g. {doubled[0]}"


def test_a_join_restarted_in_the_other_shape_matches_the_oracle(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The same for a full outer join of unkeyed inputs: micro-batches, long-running,
    micro-batches; every match and unmatched row once (the upsert view fails on a
    result sent twice)."""
    names = (unique_name("job"), unique_name("left"), unique_name("right"))
    join = random_join(kafka_bootstrap, tmp_path, names, kind="full", produce=False)
    modes = ("micro_batch", "long_running", "micro_batch")
    for i, mode in enumerate(modes):
        join.produce(kafka_bootstrap, i, len(modes))
        spark_section = join.config.spark.model_copy(update={"mode": mode})
        run = join.config.model_copy(update={"spark": spark_section})
        run_to_end(run, kafka_bootstrap, spark)
    assert join.got(kafka_bootstrap) == join.expected()


@pytest.mark.parametrize(
    "modes", [("long_running", "micro_batch"), ("micro_batch", "long_running")], ids=str
)
def test_a_job_started_at_latest_keeps_its_start_in_the_other_shape(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    modes: tuple[str, str],
) -> None:
    """A job first started at ``latest`` skips what was there then, and reads what came
    while it was stopped, whichever shape runs next (user walkthrough). Before, the
    shapes kept their starts apart: micro-batches after long-running workers resolved
    ``latest`` again and skipped what came meanwhile (or, at ``earliest``, read the
    records before the job's start), and long-running workers after micro-batches did
    the same."""
    topic = unique_name("clicks")
    stream = make_stream(600, keys=20, seed=7)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    config = job_config(tmp_path, topic, unique_name("job"))
    before, meanwhile = records[:300], records[300:]
    produce(kafka_bootstrap, topic, before, round_robin=True, partitions=PARTITIONS)
    totals = []
    for mode, part in zip(modes, [[], meanwhile], strict=True):
        produce(kafka_bootstrap, topic, part, round_robin=True, partitions=PARTITIONS)
        run = config.model_copy(update={"spark": config.spark.model_copy(update={"mode": mode})})
        job = run_to_end(run, kafka_bootstrap, spark, starting_offsets="latest")
        totals.append(job.run_totals.totals)
    assert totals[0].get("applied", 0) == 0, totals  # what was there at the first start
    assert totals[1].get("applied", 0) == len(meanwhile), totals
    assert totals[1].get("replayed", 0) == 0, totals
