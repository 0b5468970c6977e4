"""The task runner on a real broker, without Spark: outputs, replays, expiring LATE results."""

from __future__ import annotations

import base64
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from jobkit import batch_job, join_batch_job, read_topic
from jobkit import input_records as records

from window_operator.kernel import InputPosition
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.runtime.commit import TaskState, last_writer
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.plan import SourceSpec
from window_operator.runtime.producers import close_producers
from window_operator.runtime.runner import RecordTooLargeError, _replayed
from window_operator.runtime.settings import TaskSettings

pytestmark = pytest.mark.kafka
S = 1000


def test_late_results_of_windows_expiring_in_the_same_batch_are_sent(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, runner = batch_job(
        kafka_bootstrap,
        unique_name,
        tmp_path,
        emit={"late": "10s"},
        retention={"time": "30s"},
    )
    config = runner.settings.config
    # window [0, 10s) fires ON_TIME when 15 s arrives
    runner.run_batch(
        [records(topic, 0, [{"k": "a", "ts": 1 * S}, {"k": "a", "ts": 15 * S}])], 1_000
    )
    # a late event for [0, 10s): its LATE update waits for the 10 s period
    runner.run_batch([records(topic, 2, [{"k": "a", "ts": 2 * S}])], 2_000)
    # 3 s later (period not over) the watermark jumps past the window's retention: the
    # pending LATE result must go out before the window is expired
    runner.run_batch([records(topic, 3, [{"k": "a", "ts": 100 * S}])], 5_000)
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    first = [
        (r["kind"], r["update_seq"], r["values"]["n"]) for r in results if r["window_start"] == 0
    ]
    assert first == [("ON_TIME", 0, 1), ("LATE", 1, 2)]


def test_replayed_batches_are_not_counted_twice(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, runner = batch_job(kafka_bootstrap, unique_name, tmp_path)
    config = runner.settings.config
    good = records(topic, 0, [{"k": "a", "ts": t * S} for t in (1, 2, 3)])
    batch = InputRecords(topic, 0, [*good.offsets, 3], [*good.keys, b"a"], [*good.values, b"{"])
    first = runner.run_batch([batch], 1_000).tasks[0]
    assert (first.applied, first.replayed, first.rejected) == (3, 0, 1)
    again = runner.run_batch([batch], 2_000).tasks[0]  # Spark re-delivers the same offsets
    # every record read has one verdict: the bad one was rejected before, not again
    assert (again.applied, again.replayed, again.rejected) == (0, 4, 0)
    runner.run_batch([records(topic, 4, [{"k": "a", "ts": 30 * S}])], 3_000)
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    assert [m.value() for m in errors] == [b"{"]
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    assert [(r["window_start"], r["values"]["n"]) for r in results] == [(0, 3)]


def test_offsets_windows_run_one_partition_per_task_and_name_it(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Each task keeps only its partition's offsets: it neither claims the other
    partition nor reads it back as a gap."""
    topic, runner = batch_job(
        kafka_bootstrap,
        unique_name,
        tmp_path,
        partitions=2,
        window={"type": "offsets", "size": 2},
    )
    config = runner.settings.config
    assert runner.settings.tasks == 2

    def part(partition: int, first: int, keys: str) -> InputRecords:
        events = [{"k": k, "ts": S} for k in keys]
        got = records(topic, first, events)
        return InputRecords(topic, partition, got.offsets, got.keys, got.values)

    first = runner.run_batch([part(0, 0, "aab"), part(1, 0, "bb")], 1_000)
    second = runner.run_batch([part(0, 3, "a"), part(1, 2, "bbb")], 2_000)
    assert [t.applied for t in first.tasks] == [3, 2]
    assert [t.applied for t in second.tasks] == [1, 3]
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    got = sorted((r["key"], r["window_start"], r["values"]["n"]) for r in results)
    # partition 0: a a | b a      partition 1: b b | b b | b
    # a window fires once its partition delivered an offset past its end: [2, 4) of
    # partition 0 and [4, 6) of partition 1 are still open
    assert got == [("a", 0, 2), ("b", 0, 2), ("b", 2, 2)]
    # offset 4 of partition 0 fires its [2, 4): b's window there has the bounds of b's
    # [2, 4) in partition 1, and the output (an upsert log) keeps both
    runner.run_batch([part(0, 4, "b")], 3_000)
    latest = {
        m.key(): orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)
    }
    answers = sorted(
        (r["key"], r["partition"], r["window_start"], r["values"]["n"]) for r in latest.values()
    )
    assert answers == [
        ("a", 0, 0, 2), ("a", 0, 2, 1), ("b", 0, 2, 1), ("b", 1, 0, 2), ("b", 1, 2, 2)
    ]  # fmt: skip


def test_a_late_join_row_and_its_late_partner_in_one_batch_match_without_an_unmatched_row(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A task decides a batch's two inputs together, as ``simulate`` does. Before, it
    added the orders first: an order already behind the watermark went out as
    LEFT_UNMATCHED, then its shipment of the same batch retracted it with a MATCH, so
    a reader of the stream saw an unmatched order that never was."""
    join = {"kind": "left", "between": ["-3s", "4s"]}
    orders, shipments, runner = join_batch_job(kafka_bootstrap, unique_name, tmp_path, join)
    config = runner.settings.config
    runner.run_batch(
        [
            records(orders, 0, [{"k": 1, "ts": 100 * S}]),
            records(shipments, 0, [{"k": 1, "ts": 100 * S}]),
        ],
        1_000,
    )
    # both behind the watermark (100 s): late, and partners
    late = runner.run_batch(
        [
            records(orders, 1, [{"k": 2, "ts": 95 * S}]),
            records(shipments, 1, [{"k": 2, "ts": 96 * S}]),
        ],
        2_000,
    )
    assert sum(t.late for t in late.tasks) == 2
    got = [
        ("tombstone", None) if (r := m.value()) is None else (orjson.loads(r)["kind"], m.key())
        for m in read_topic(kafka_bootstrap, config.output.topic)
    ]
    assert [kind for kind, _ in got] == ["MATCH", "MATCH"]


def test_join_rows_out_of_retention_name_their_input(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A join's ``OUT_OF_RETENTION`` error records name the input that rejected them
    (header ``source.input``), as its decode errors do; ``read --errors`` showed no
    ``source`` for them (a walkthrough)."""
    orders, shipments, runner = join_batch_job(
        kafka_bootstrap, unique_name, tmp_path, {"range": "1s"}, retention={"time": "1m"}
    )
    config = runner.settings.config
    first = [{"k": 1, "ts": 600 * S}]
    runner.run_batch([records(orders, 0, first), records(shipments, 0, first)], 1_000)
    runner.run_batch(
        [records(orders, 1, [{"k": 2, "ts": S}]), records(shipments, 1, [{"k": 3, "ts": S}])],
        2_000,
    )
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    got = sorted(
        (h["source.input"], h["error.code"], h["source.topic"])
        for h in ({k: v.decode() for k, v in m.headers() or []} for m in errors)
    )
    assert got == [
        ("orders", "OUT_OF_RETENTION", orders),
        ("shipments", "OUT_OF_RETENTION", shipments),
    ]


def test_a_partition_read_in_a_batch_is_not_idle_at_its_start(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """An hour between two batches (idle_timeout 10 s): partition 0 brings records in the
    second, so it is not idle at its start, and its records are not out of retention
    (before, the watermark jumped to partition 1's 100 s first)."""
    topic, runner = batch_job(
        kafka_bootstrap,
        unique_name,
        tmp_path,
        partitions=2,
        watermark={"allowed_lateness": "0s", "idle_timeout": "10s"},
        retention={"time": "30s"},
    )
    config = runner.settings.config

    def part(p: int, first: int, events: list[dict[str, Any]]) -> InputRecords:
        r = records(topic, first, events)
        return InputRecords(r.topic, p, r.offsets, r.keys, r.values)

    now = 1_800_000_000_000
    runner.run_batch(
        [part(0, 0, [{"k": "a", "ts": 1 * S}]), part(1, 0, [{"k": "b", "ts": 100 * S}])], now
    )
    batch = runner.run_batch(
        [part(0, 1, [{"k": "a", "ts": 2 * S}, {"k": "a", "ts": 50 * S}])], now + 3_600_000
    )
    assert sum(t.rejected for t in batch.tasks) == 0
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    first = [(r["kind"], r["values"]["n"]) for r in results if r["window_start"] == 0]
    assert first == [("ON_TIME", 2)]


def test_an_error_of_a_self_join_is_a_replay_by_the_position_of_its_own_input() -> None:
    """Both inputs read one topic: an error record is checked against the position of
    the input that rejected it (its ``source``), not of the first input of the topic."""
    plan: Any = SimpleNamespace(sources=(SourceSpec(0, "l", "t"), SourceSpec(1, "r", "t")))
    offsets = {InputPosition(0, 0): 10, InputPosition(1, 0): 3}

    def error(source: str | None) -> ErrorRecord:
        return ErrorRecord(ErrorCode.BAD_JSON, "x", 0, 5, topic="t", source=source)

    assert _replayed(error("l"), offsets, plan)
    assert not _replayed(error("r"), offsets, plan)
    assert _replayed(error(None), offsets, plan)  # one input named: by its topic


def test_records_over_the_output_bound_do_not_stop_the_job(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A rejected input record or a window result larger than Kafka takes (1 MB by
    default) could not be sent however often the batch was retried: one such record
    stopped every batch after it (a user walkthrough: a 1.5 MB key, BAD_KEY). The copy is
    left out of the error record now, and a result that large is a RESULT_ERROR; a
    state value that large (here a ``collect`` of a 1.5 MB value) goes to the changelog,
    whose bound is 32 MiB."""
    topic, runner = batch_job(
        kafka_bootstrap,
        unique_name,
        tmp_path,
        aggregations=[{"name": "n", "op": "count"}, {"name": "b", "op": "collect", "field": "b"}],
    )
    config = runner.settings.config
    assert config.output.max_record_bytes == 990_000
    big = "x" * 1_500_000
    events = [
        {"k": "a", "ts": 1 * S, "b": "small"},
        {"k": big, "ts": 1 * S, "b": ""},  # BAD_KEY: over 4096 bytes
        {"k": "c", "ts": 2 * S, "b": big},  # its window's result is 1.5 MB
        {"k": "a", "ts": 60 * S, "b": ""},  # fires both windows
    ]
    report = runner.run_batch([records(topic, 0, events)], 1_000).tasks
    assert sum(t.rejected for t in report) == 1 and sum(t.result_errors for t in report) == 1
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    assert [(r["key"], r["values"]["n"]) for r in results] == [("a", 1)]
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    by_code = {dict(m.headers() or [])["error.code"]: m for m in errors}
    assert sorted(by_code) == [b"BAD_KEY", b"RESULT_ERROR"]
    bad_key = by_code[b"BAD_KEY"]
    assert (bad_key.key(), bad_key.value()) == (None, None)
    reason = dict(bad_key.headers() or [])["error.reason"].decode()
    assert "the record is not copied here: its key and value are 3000025 bytes" in reason
    assert (
        b"output.max_record_bytes" in dict(by_code[b"RESULT_ERROR"].headers() or [])["error.reason"]
    )


def test_a_record_kafka_refuses_as_too_large_stops_the_batch_at_once(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A bound raised past what the output topic takes: the broker refuses the result,
    which no retry can change, so the task says so at once instead of waiting
    ``broker_timeout`` for a broker that is there."""
    topic, runner = batch_job(
        kafka_bootstrap,
        unique_name,
        tmp_path,
        aggregations=[{"name": "b", "op": "collect", "field": "b"}],
        output={"max_record_bytes": 5_000_000},
    )
    config = runner.settings.config
    blob = base64.b64encode(random.Random(1).randbytes(1_200_000)).decode()  # incompressible
    events = [{"k": "c", "ts": 2 * S, "b": blob}, {"k": "c", "ts": 60 * S, "b": ""}]
    started = time.monotonic()
    with pytest.raises(RecordTooLargeError, match="Kafka refused a record of batch 0 as too large"):
        runner.run_batch([records(topic, 0, events)], 1_000)
    assert time.monotonic() - started < config.processing.broker_timeout / 1000


def test_a_pass_that_changes_nothing_commits_nothing(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """An idle job's timer passes move only the wall clock: they commit no transaction
    and log nothing that every restore would read again. A new producer's first idle
    pass commits nothing either (its token is recorded in the store only, as it is
    never logged), and a store restored from the changelog after idle passes goes on
    as if they had committed."""
    topic, runner = batch_job(kafka_bootstrap, unique_name, tmp_path)
    settings = runner.settings
    config = settings.config
    first = runner.run_batch([records(topic, 0, [{"k": "a", "ts": t * S} for t in (1, 2)])], 1_000)
    assert (first.tasks[0].commits, first.tasks[0].changelog_records > 0) == (1, True)
    logged = len(read_topic(kafka_bootstrap, settings.changelog_topic))
    idle = [r for now in (2_000, 3_000, 4_000) for r in runner.tick(now)]
    assert [(r.commits, r.changelog_records) for r in idle] == [(0, 0)] * 3
    assert len(read_topic(kafka_bootstrap, settings.changelog_topic)) == logged
    before = writer_of(settings)
    close_producers()  # the next pass has a new producer: it records its token, locally
    assert [r.commits for r in runner.tick(5_000)] == [0]
    assert len(read_topic(kafka_bootstrap, settings.changelog_topic)) == logged
    assert writer_of(settings) not in (None, before)
    assert [r.commits for r in runner.tick(6_000)] == [0]
    # another host: the store comes back from the changelog, and the window goes on
    shutil.rmtree(settings.task_path(0))
    later = runner.run_batch([records(topic, 2, [{"k": "a", "ts": 3 * S}])], 7_000).tasks[0]
    assert later.restored_records > 0 and later.applied == 1
    runner.run_batch([records(topic, 3, [{"k": "a", "ts": 30 * S}])], 8_000)
    results = [orjson.loads(m.value()) for m in read_topic(kafka_bootstrap, config.output.topic)]
    assert [(r["window_start"], r["values"]["n"]) for r in results] == [(0, 3)]


def writer_of(settings: TaskSettings) -> str | None:
    """The token of the producer task 0's store says committed it last."""
    store = TaskState.open_store(settings, 0)
    try:
        return last_writer(store)
    finally:
        store.close()
