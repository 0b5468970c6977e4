"""Exactly-once: one transaction per state task and batch, zombies fenced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from jobkit import batch_job, create_topic, input_records, read_topic

from stores.changelog import ChangelogDelivery
from stores.rocks import TaskStore
from window_operator.errors import OutputSendError
from window_operator.runtime import producers
from window_operator.runtime.batch import LocalJob
from window_operator.runtime.commit import TaskState
from window_operator.runtime.report import TaskReport
from window_operator.runtime.settings import TaskSettings
from window_operator.runtime.sink import OutputSink, SinkTopics

pytestmark = pytest.mark.kafka

#: What the local test broker does differently from Kafka (see shared BROKER.md).
NOIDA_REINIT = (
    "noida-db 0.2.2 defect: initialising a transactional id again does not abort the open "
    "transaction of the fenced producer; its records become visible with the next commit "
    "(real Kafka aborts them)"
)


#: a batch that logged nothing (the test is about the outputs)
NO_CHANGELOG = ChangelogDelivery("changelog", 0)


def transactional(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    return producer


def sink(producer: Producer, topics: SinkTopics) -> OutputSink:
    return OutputSink(producer, topics, transactional=True, timeout_s=30)


def test_a_zombie_task_cannot_commit_and_its_output_stays_invisible(
    kafka_bootstrap: str, unique_name: Callable[[str], str], local_broker: bool
) -> None:
    topics = SinkTopics(unique_name("out"), unique_name("errors"))
    for t in (topics.results, topics.errors):
        create_topic(kafka_bootstrap, t, 1)
    txn_id = unique_name("job") + "-task-0"
    # the old task: a producer that started its batch and then paused (a stalled worker)
    old = sink(transactional(kafka_bootstrap, txn_id), topics)
    old.begin()
    old.results([(b"w1", b"from the zombie")])
    old.producer.flush(30)
    # Spark re-ran the task elsewhere: the new producer of the same task fences the old
    new = sink(transactional(kafka_bootstrap, txn_id), topics)
    new.begin()
    new.results([(b"w1", b"from the new task")])
    new.commit(NO_CHANGELOG)
    with pytest.raises(OutputSendError):
        old.commit(NO_CHANGELOG)
    values = [m.value() for m in read_topic(kafka_bootstrap, topics.results)]
    if local_broker and b"from the zombie" in values:
        pytest.xfail(NOIDA_REINIT)
    assert values == [b"from the new task"]


def test_a_commit_of_another_copy_during_the_catch_up_is_not_applied_twice(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two copies of a task (a zombie attempt, a second copy of the job with its own
    state directory) over the same input. The second opens its store and catches up;
    the first commits the next batch right after that catch-up read the changelog.
    The second's producer was initialised before the catch-up, so the first's commit
    fenced it: the second's batch, applied over the state before that commit, cannot
    commit, and runs again caught up, as a replay. (Initialised after the catch-up, it
    fenced nobody and committed the batch a second time over the state before it.)
    The second copy's batch is a fresh attempt (no producer kept from its last batch,
    as after a restart); the first keeps its own."""
    topic, first = batch_job(kafka_bootstrap, unique_name, tmp_path / "one")
    second = LocalJob(replace(first.settings, state_dir=str(tmp_path / "two")))
    b1 = input_records(topic, 0, [{"k": "a", "ts": t * 1000} for t in (1, 2, 3)])
    b2 = input_records(topic, 3, [{"k": "a", "ts": t * 1000} for t in (4, 5, 6)])
    assert first.run_batch([b1], 1_000).tasks[0].applied == 3
    assert second.run_batch([b1], 1_000).tasks[0].replayed == 3  # caught up with the first

    real_catch_up = TaskState.catch_up
    interleaved: list[TaskReport] = []

    def catch_up(
        settings: TaskSettings, task: int, store: TaskStore, progress: None = None
    ) -> TaskState:
        state = real_catch_up(settings, task, store, progress)
        if settings.state_dir == second.settings.state_dir and not interleaved:
            interleaved.extend(first.run_batch([b2], 2_000).tasks)  # lands after the read
        return state

    monkeypatch.setattr(TaskState, "catch_up", catch_up)
    monkeypatch.setattr(producers, "_TRANSACTIONAL", {})  # the second copy starts afresh
    report = second.run_batch([b2], 2_000).tasks[0]
    assert [r.applied for r in interleaved] == [3]
    assert (report.applied, report.replayed, report.attempts) == (0, 3, 2)
    fences = [r.getMessage() for r in caplog.records if "fenced this one" in r.getMessage()]
    assert fences and all("a second copy of job" in f for f in fences), fences
    # the window [0, 10 s) fires once, with the six events
    second.run_batch([input_records(topic, 6, [{"k": "a", "ts": 30_000}])], 3_000)
    output = read_topic(kafka_bootstrap, first.settings.config.output.topic)
    results = [orjson.loads(m.value()) for m in output]
    assert [(r["window_start"], r["values"]["n"]) for r in results] == [(0, 6)]


def test_a_traced_sink_names_its_attempt_on_error_records_too(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """The crash trials tell the test broker's duplicates (an uncommitted attempt's
    records committed with the next) by the ``attempt`` header. Error records had
    none, so such a copy of one counted as the job's (a crash-trials walkthrough)."""
    from window_operator.results import ErrorCode, ErrorRecord

    topics = SinkTopics(unique_name("out"), unique_name("errors"))
    for t in (topics.results, topics.errors):
        create_topic(kafka_bootstrap, t, 1)
    traced = OutputSink(
        transactional(kafka_bootstrap, unique_name("tx")), topics, transactional=True,
        timeout_s=30, attempt="a1",
    )  # fmt: skip
    traced.begin()
    traced.results([(b"w", b"v")])
    traced.errors([ErrorRecord(ErrorCode.BAD_JSON, "not json", 0, 7, b"x", "in")])
    traced.commit(NO_CHANGELOG)
    for topic in (topics.results, topics.errors):
        (m,) = read_topic(kafka_bootstrap, topic)
        assert dict(m.headers() or [])["attempt"] == b"a1", topic
    (error,) = read_topic(kafka_bootstrap, topics.errors)
    assert dict(error.headers() or [])["error.code"] == b"BAD_JSON"
